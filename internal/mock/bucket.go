package mock

import (
	"math"
	"time"
)

// bucket is one continuously refilled token bucket (spec §1.2, §8.2): it
// holds up to depth tokens and gains rate tokens per second, so
// level(t) = min(depth, level(t0) + rate·(t − t0)). Charges may drive the
// level negative (reconciliation of actual usage); it then refills from
// below zero. A bucket with limit 0 is unlimited and never refuses.
//
// Methods take now and are not safe for concurrent use; the owning keyState
// holds the lock.
type bucket struct {
	limit float64 // per-minute limit; 0 = unlimited
	rate  float64 // tokens per second
	depth float64 // capacity
	level float64
	last  time.Time
}

func newBucket(limit int64, burstSeconds float64, now time.Time) bucket {
	if limit <= 0 {
		return bucket{}
	}
	rate := float64(limit) / 60
	depth := rate * burstSeconds
	return bucket{limit: float64(limit), rate: rate, depth: depth, level: depth, last: now}
}

func (b *bucket) unlimited() bool { return b.limit == 0 }

// refill brings the level up to now. Time moving backwards is ignored.
func (b *bucket) refill(now time.Time) {
	if b.unlimited() {
		return
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.level = math.Min(b.depth, b.level+b.rate*dt.Seconds())
		b.last = now
	}
}

// deficit is how many tokens are missing for need (0 when it fits).
func (b *bucket) deficit(need float64) float64 {
	if b.unlimited() {
		return 0
	}
	return math.Max(0, need-b.level)
}

// wait is how long until need fits, assuming no other charge.
func (b *bucket) wait(need float64) time.Duration {
	d := b.deficit(need)
	if d == 0 {
		return 0
	}
	return time.Duration(d / b.rate * float64(time.Second))
}

// charge takes n tokens (n < 0 refunds, capped at depth).
func (b *bucket) charge(n float64) {
	if b.unlimited() {
		return
	}
	b.level = math.Min(b.depth, b.level-n)
}

// chargeRejected takes one token for a refused request but never pushes the
// level below zero (or further below it), so a client hammering a closed
// bucket does not postpone the retry-after it was given.
func (b *bucket) chargeRejected() {
	if b.unlimited() {
		return
	}
	b.level = math.Max(b.level-1, math.Min(b.level, 0))
}

// toFull is how long until the bucket is full again.
func (b *bucket) toFull() time.Duration {
	if b.unlimited() || b.level >= b.depth {
		return 0
	}
	return time.Duration((b.depth - b.level) / b.rate * float64(time.Second))
}

package opsview

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// The "why it waits" part of /v1/status: what each upstream's queue head
// waits on, the oldest wait per class, the breaker's history, the last
// 429/529 and the job queue's counts.

// WaitingOn says what the head of an upstream's queue waits on; null in
// /v1/status when nothing waits.
type WaitingOn struct {
	// Reason is quota, paused, breaker_open, concurrency, keys_out,
	// urgent_room or client_limit.
	Reason string `json:"reason"`
	// Dimension names the bucket short of room (quota only).
	Dimension string `json:"dimension,omitempty"`
	// Until is when the cause should lift; absent when a completion, a
	// probe or an operator lifts it.
	Until *time.Time `json:"until,omitempty"`
	// Key is the fingerprint of the pool's key the explanation is for.
	Key string `json:"key,omitempty"`
	// Client and Limit name the client whose own limit holds what waits,
	// and the limit (client_limit only; another client's are cut for a
	// caller that is not an admin).
	Client string `json:"client,omitempty"`
	Limit  string `json:"limit,omitempty"`
}

// WaitClientLimit is WaitingOn.Reason when every queued request is held
// back by its client's own limit.
const WaitClientLimit = dispatch.WaitClientLimit

// BreakerEventStatus is one entry of an upstream's breaker history.
type BreakerEventStatus struct {
	At    time.Time `json:"at"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Cause string    `json:"cause"`
}

// ThrottleStatus is the last 429 or 529 an upstream answered.
type ThrottleStatus struct {
	At        time.Time `json:"at"`
	Status    int       `json:"status"`
	ErrorType string    `json:"error_type,omitempty"`
	Message   string    `json:"message,omitempty"`
	// RetryAfterSeconds is the provider's hint, absent when it gave none.
	RetryAfterSeconds *float64 `json:"retry_after_seconds,omitempty"`
}

// JobCounts are one upstream's jobs in the durable queue.
type JobCounts struct {
	// Queued includes Delayed (queued, waiting out a backoff or hint).
	Queued  int `json:"queued"`
	Delayed int `json:"delayed"`
	Running int `json:"running"`
	// Dead counts dead-lettered jobs, up to jobstore.ListLimitMax
	// (DeadCapped is then true).
	Dead       int  `json:"dead"`
	DeadCapped bool `json:"dead_capped,omitempty"`
}

// roundIn rounds a bucket quantity in the dimension's user unit: whole
// tokens, requests to a tenth.
func roundIn(d flow.Dim, v float64) float64 {
	if d == flow.Requests {
		return math.Round(v*10) / 10
	}
	return math.Round(v)
}

// bucketStatus is b for /v1/status, rounded, with the provider's view.
func bucketStatus(d flow.Dim, b flow.BucketState) BucketStatus {
	bs := BucketStatus{LimitPerMinute: roundIn(d, b.Capacity), Depth: roundIn(d, b.Depth), Level: roundIn(d, b.Level),
		Used: roundIn(d, max(b.Depth-b.Level, 0))}
	if !b.ReportedAt.IsZero() {
		t := b.ReportedAt.UTC()
		bs.ProviderAt = &t
		if b.Reported.Limit > 0 {
			v := roundIn(d, b.Reported.Limit)
			bs.ProviderLimit = &v
		}
		if b.Reported.Remaining >= 0 {
			v := roundIn(d, b.Reported.Remaining)
			bs.ProviderRemaining = &v
		}
	}
	return bs
}

// HeldClient is a client whose own limit holds its queued requests back
// on an upstream, in one class.
type HeldClient struct {
	Client   string `json:"client"`
	Priority string `json:"priority"`
	// Queued is how many of its requests wait in the class.
	Queued int `json:"queued"`
	// Limit names the limit ("client acme's requests_per_minute (30) on
	// claude"); Until is when it has room (absent: when one of the
	// client's requests in flight ends).
	Limit string     `json:"limit"`
	Until *time.Time `json:"until,omitempty"`
}

// explain fills st's why-it-waits fields from the engine.
func explain(st *UpstreamStatus, e Engine, now time.Time) {
	x := e.Explain()
	if x.Waiting.Reason != "" {
		w := &WaitingOn{Reason: x.Waiting.Reason, Dimension: x.Waiting.Dimension, Key: x.Waiting.Key,
			Client: x.Waiting.Client, Limit: x.Waiting.Limit}
		if !x.Waiting.Until.IsZero() {
			t := x.Waiting.Until.UTC()
			w.Until = &t
		}
		st.WaitingOn = w
	}
	for _, h := range x.Held {
		hc := HeldClient{Client: h.Client, Priority: h.Class.String(), Queued: h.Queued, Limit: h.Limit}
		if !h.Until.IsZero() {
			t := h.Until.UTC()
			hc.Until = &t
		}
		st.Held = append(st.Held, hc)
	}
	for c, at := range x.OldestArrival {
		if !at.IsZero() {
			st.OldestWait[llm.Priority(c).String()] = math.Round(max(now.Sub(at).Seconds(), 0)*1000) / 1000
		}
	}
	st.BreakerHeld = x.BreakerHeld
	for _, ev := range x.BreakerHistory {
		st.BreakerHistory = append(st.BreakerHistory, BreakerEventStatus{At: ev.At.UTC(), From: ev.From.String(), To: ev.To.String(), Cause: ev.Cause})
	}
	st.Last429, st.Last529 = throttleStatus(x.LastRateLimit), throttleStatus(x.LastOverload)
}

func throttleStatus(t dispatch.Throttle) *ThrottleStatus {
	if t.At.IsZero() {
		return nil
	}
	ts := &ThrottleStatus{At: t.At.UTC(), Status: t.Status, ErrorType: t.ErrorType, Message: t.Message}
	if t.HasHint {
		v := t.Hint.Seconds()
		ts.RetryAfterSeconds = &v
	}
	return ts
}

// statusJobs caches the job counts of /v1/status for JobCountMaxAge, so
// that dashboards polling every few seconds do not each read the store
// (the dead count lists up to jobstore.ListLimitMax jobs).
type statusJobs struct {
	mu     sync.Mutex
	at     time.Time
	counts map[string]*JobCounts
}

// jobCountsFor returns the durable queue's counts per upstream (nil when
// the queue is not running or the store does not answer in time), read at
// most once per JobCountMaxAge.
func (v *View) jobCountsFor(ctx context.Context) map[string]*JobCounts {
	if v.jobs() == nil {
		return nil
	}
	c := &v.statusJobs
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := v.clock.Now(); c.at.IsZero() || now.Sub(c.at) >= JobCountMaxAge {
		c.counts, c.at = v.readJobCounts(ctx), now
	}
	return c.counts
}

func (v *View) readJobCounts(ctx context.Context) map[string]*JobCounts {
	st := v.jobs()
	if st == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, JobCountTimeout)
	defer cancel()
	live, err := st.CountLive(ctx, v.clock.Now())
	if err != nil {
		v.log.Warn("counting jobs for /v1/status", "err", err)
		return nil
	}
	out := map[string]*JobCounts{}
	for _, name := range v.order {
		out[name] = &JobCounts{}
	}
	for _, l := range live {
		if out[l.Upstream] == nil {
			continue
		}
		out[l.Upstream].Queued, out[l.Upstream].Delayed, out[l.Upstream].Running = l.Queued, l.Delayed, l.Running
	}
	for _, name := range v.order {
		page, err := st.List(ctx, jobstore.ListParams{State: jobstore.StateDead, Upstream: name, Limit: jobstore.ListLimitMax})
		if err != nil {
			v.log.Warn("counting dead jobs for /v1/status", "err", err)
			continue
		}
		out[name].Dead, out[name].DeadCapped = len(page.Jobs), page.Next != 0
	}
	return out
}

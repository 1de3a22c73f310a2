package opsview

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
)

// The history sampler keeps the last few minutes of each upstream's queue
// depth per class, requests admitted and outcomes per second, latency
// quantiles per class and quota buckets (available, and the provider's
// view) in a ring, for GET /v1/status/history and the dashboard's charts.

const (
	// HistoryIntervalDefault is the time between two samples.
	HistoryIntervalDefault = 2 * time.Second
	// HistorySamplesDefault is how many samples the ring keeps: five
	// minutes at the default interval.
	HistorySamplesDefault = 150
)

// HistorySample is one instant of one upstream.
type HistorySample struct {
	Time time.Time `json:"time"`
	// Queued is the queue length per class.
	Queued map[string]int `json:"queued"`
	// InFlight is how many requests were being sent or streamed.
	InFlight int `json:"in_flight"`
	// Rates are outcomes per second since the previous sample: success,
	// 429, 529 (overloaded) and shed (Sluice gave up or refused).
	Rates OutcomeRates `json:"rates"`
	// Latency holds, per class, the p50/p95/p99 of the time in the
	// gateway of the requests finished since the previous sample (absent
	// for a class with none).
	Latency map[string]Quantiles `json:"latency"`
	// Buckets are the quota buckets with a known limit, by dimension:
	// what is available now against the depth, and the provider's own
	// view.
	Buckets map[string]BucketSample `json:"buckets,omitempty"`
}

// BucketSample is one quota bucket at one instant, in its dimension's
// unit (tokens or requests), rounded as in /v1/status.
type BucketSample struct {
	// Available is the room now (the bucket's level; negative after an
	// overrun), Depth what it holds when full.
	Available float64 `json:"available"`
	Depth     float64 `json:"depth"`
	// ProviderRemaining is what the provider's rate-limit headers last
	// said was left (absent until it reports), ProviderLimit its limit.
	ProviderRemaining *float64 `json:"provider_remaining,omitempty"`
	ProviderLimit     *float64 `json:"provider_limit,omitempty"`
}

// OutcomeRates are events per second: requests admitted (sent after
// their wait in the queue), upstream attempts answered success, 429 and
// 529 (overloaded), and requests shed (Sluice gave up or refused).
type OutcomeRates struct {
	Admitted float64 `json:"admitted"`
	Success  float64 `json:"success"`
	R429     float64 `json:"429"`
	R529     float64 `json:"529"`
	Shed     float64 `json:"shed"`
}

// Quantiles are latencies in seconds.
type Quantiles struct {
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Count int     `json:"count"`
}

// HistoryResponse is GET /v1/status/history's body.
type HistoryResponse struct {
	IntervalSeconds float64                    `json:"interval_seconds"`
	Upstreams       map[string][]HistorySample `json:"upstreams"`
}

// HistorySampler samples the gateway every interval into a ring. It has
// its own lifecycle (lifecycle.Base); Stop is idempotent and safe before
// Start.
type HistorySampler struct {
	v        *View
	clock    clock.Clock
	interval time.Duration
	size     int

	life lifecycle.Base // Start and Stop; runs the sampling loop

	mu     sync.Mutex
	rings  map[string][]HistorySample
	prev   map[string][5]uint64
	prevAt time.Time
}

func newHistorySampler(v *View, clk clock.Clock, interval time.Duration, size int) *HistorySampler {
	return &HistorySampler{v: v, clock: clk, interval: interval, size: size,
		rings: map[string][]HistorySample{}, prev: map[string][5]uint64{}}
}

// Start samples once now, then every interval until Stop.
func (h *HistorySampler) Start(ctx context.Context) error {
	err := h.life.Start(ctx, func(run context.Context) error {
		h.sample(h.clock.Now())
		h.life.Go(func() { h.loop(run) })
		return nil
	})
	if err != nil {
		return fmt.Errorf("starting the history sampler: %w", err)
	}
	return nil
}

func (h *HistorySampler) loop(ctx context.Context) {
	t := h.clock.NewTimer(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		h.sample(h.clock.Now())
		t.Reset(h.interval)
	}
}

// Stop ends the sampling and waits for the loop to exit (or ctx).
func (h *HistorySampler) Stop(ctx context.Context) error {
	if err := h.life.Stop(ctx, nil); err != nil {
		return fmt.Errorf("stopping the history sampler: %w", err)
	}
	return nil
}

func (h *HistorySampler) sample(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sampleLocked(now)
}

func (h *HistorySampler) sampleLocked(now time.Time) {
	dt := now.Sub(h.prevAt).Seconds()
	first := h.prevAt.IsZero()
	h.prevAt = now
	for _, name := range h.v.order {
		sm := HistorySample{Time: now.UTC(), Queued: map[string]int{}, Latency: map[string]Quantiles{}}
		if e := h.v.engine(name); e != nil {
			snap := e.Snapshot()
			for c, n := range snap.Queued {
				sm.Queued[llm.Priority(c).String()] = n
			}
			sm.InFlight = snap.InFlight
			for d, b := range snap.Buckets {
				if b.Capacity > 0 {
					bs := bucketStatus(flow.Dim(d), b)
					if sm.Buckets == nil {
						sm.Buckets = map[string]BucketSample{}
					}
					sm.Buckets[flow.Dim(d).String()] = BucketSample{Available: bs.Level, Depth: bs.Depth,
						ProviderRemaining: bs.ProviderRemaining, ProviderLimit: bs.ProviderLimit}
				}
			}
		}
		if lu := h.v.live.upstream(name); lu != nil {
			cur := [5]uint64{lu.success.Load(), lu.rate429.Load(), lu.over529.Load(), lu.shed.Load(), lu.admitted.Load()}
			if p, ok := h.prev[name]; ok && !first && dt > 0 {
				rate := func(i int) float64 { return math.Round(float64(cur[i]-p[i])/dt*100) / 100 }
				sm.Rates = OutcomeRates{Success: rate(0), R429: rate(1), R529: rate(2), Shed: rate(3), Admitted: rate(4)}
			}
			h.prev[name] = cur
			for c, ls := range lu.takeLatencies() {
				if len(ls) > 0 {
					sm.Latency[llm.Priority(c).String()] = Quantiles{P50: quantile(ls, .5), P95: quantile(ls, .95),
						P99: quantile(ls, .99), Count: len(ls)}
				}
			}
		}
		ring := append(h.rings[name], sm)
		if len(ring) > h.size {
			ring = append(ring[:0], ring[len(ring)-h.size:]...)
		}
		h.rings[name] = ring
	}
}

func (h *HistorySampler) history() HistoryResponse {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := HistoryResponse{IntervalSeconds: h.interval.Seconds(), Upstreams: map[string][]HistorySample{}}
	for _, name := range h.v.order {
		out.Upstreams[name] = append([]HistorySample{}, h.rings[name]...)
	}
	return out
}

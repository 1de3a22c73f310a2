package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// snapshotter is implemented by engines that can report their state (the
// real dispatcher does).
type snapshotter interface {
	Snapshot() dispatch.Snapshot
}

// StatusResponse is the body of GET /v1/status: why requests are waiting.
type StatusResponse struct {
	Time      time.Time        `json:"time"`
	Upstreams []UpstreamStatus `json:"upstreams"`
	Cluster   *ClusterStatus   `json:"cluster,omitempty"` // status_cluster.go
	// Clients is each client's use of the gateway since it started.
	// Admin callers only.
	Clients []ClientUsage `json:"clients,omitempty"`
	// ClientLimits is each limited client's room on each upstream
	// (client_limits.go). Admin callers only.
	ClientLimits []admit.ClientLimitStatus `json:"client_limits,omitempty"`
	// Spend is each client's spend and budget windows (status_spend.go).
	// Admin callers only.
	Spend *admit.SpendStatus `json:"spend,omitempty"`
}

// forCaller drops the per-client sections a caller that is not an admin
// may not see (other clients' names and usage): a client sees the holds
// of its own limits only.
func (st *StatusResponse) forCaller(name string, admin bool) {
	if !admin {
		for i := range st.Upstreams {
			var own []HeldClient
			for _, h := range st.Upstreams[i].Held {
				if h.Client == name {
					own = append(own, h)
				}
			}
			st.Upstreams[i].Held = own
		}
		st.ClientLimits = nil
		st.Spend = nil
		st.Clients = nil
		for i := range st.Upstreams {
			for j := range st.Upstreams[i].Oldest {
				st.Upstreams[i].Oldest[j].Client = ""
			}
		}
	}
}

// UpstreamStatus is one upstream's scheduling state.
type UpstreamStatus struct {
	Name     string       `json:"name"`
	Protocol llm.Protocol `json:"protocol"`
	// Fallbacks are the upstreams its requests go to while it cannot
	// serve them, in order (internal/admit's router).
	Fallbacks []string `json:"fallbacks,omitempty"`
	// Queued is the queue length per class; OldestWait the seconds the
	// longest-waiting request of each non-empty class has waited.
	Queued     map[string]int     `json:"queued"`
	OldestWait map[string]float64 `json:"oldest_wait_seconds"`
	// WaitingOn says what the head of the queue waits on (null: nothing
	// waits). See status_why.go.
	WaitingOn *WaitingOn `json:"waiting_on"`
	// Held lists the clients whose own limit holds their queued requests
	// back (counted in Queued with everything else; see status_why.go).
	Held []HeldClient `json:"held_by_client_limit,omitempty"`
	// InFlight and ConcurrencyLimit: requests being sent or streamed, and
	// the adaptive limit they are held to.
	InFlight         int `json:"in_flight"`
	ConcurrencyLimit int `json:"concurrency_limit"`
	// OpenRequests counts the live requests the gateway is serving for
	// the upstream (queued, in flight or streaming); Oldest lists the
	// oldest of them with their age.
	OpenRequests int           `json:"open_requests"`
	Oldest       []OpenRequest `json:"oldest_open_requests"`
	// Buckets are the quota buckets that have a known limit, by dimension.
	Buckets map[string]BucketStatus `json:"buckets"`
	// PausedUntil is set while the upstream is paused after a rate limit.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// RateScale is the share of its limits the upstream refills at: below
	// 1 after an OpenAI "Slow Down", ramping back to 1 over 15 minutes.
	RateScale float64 `json:"rate_scale"`
	// Breaker is closed, open or half-open; BreakerReadyAt is when an open
	// breaker will let probes through.
	Breaker        string     `json:"breaker"`
	BreakerReadyAt *time.Time `json:"breaker_ready_at,omitempty"`
	// BreakerHeld is true while an operator holds the breaker open;
	// BreakerHistory lists its last changes, oldest first.
	BreakerHeld    bool                 `json:"breaker_held,omitempty"`
	BreakerHistory []BreakerEventStatus `json:"breaker_history"`
	// Last429 and Last529 are the last rate-limit and overloaded answers.
	Last429 *ThrottleStatus `json:"last_429"`
	Last529 *ThrottleStatus `json:"last_529"`
	// Jobs counts the upstream's jobs in the durable queue (absent when the
	// queue is off).
	Jobs *JobCounts  `json:"jobs,omitempty"`
	Keys []KeyStatus `json:"keys,omitempty"` // the key pool (status_pool.go)
}

// BucketStatus is one quota bucket, in its dimension's unit (tokens or
// requests), rounded: whole tokens, requests to a tenth.
type BucketStatus struct {
	// LimitPerMinute is the limit Sluice holds itself to (after the safety
	// margin).
	LimitPerMinute float64 `json:"limit_per_minute"`
	// Depth is how much the bucket holds when full.
	Depth float64 `json:"depth"`
	// Level is the room available now (the headroom); negative after an
	// overrun. Used is Depth minus Level: taken and not yet refilled,
	// in-flight reservations included.
	Level float64 `json:"level"`
	Used  float64 `json:"used"`
	// Reserved is the part of Used held by requests in flight (their
	// estimate, not yet settled); upstream-level buckets only.
	Reserved float64 `json:"reserved,omitempty"`
	// ProviderLimit and ProviderRemaining are the provider's own view, as
	// its rate-limit headers last reported it at ProviderAt (absent until
	// it reports).
	ProviderLimit     *float64   `json:"provider_limit,omitempty"`
	ProviderRemaining *float64   `json:"provider_remaining,omitempty"`
	ProviderAt        *time.Time `json:"provider_at,omitempty"`
	// UrgentRoom is, per class, what its requests leave unused in the
	// bucket for the more urgent classes' bursts (learned, or the
	// configured headroom while it applies); classes that leave nothing
	// are omitted. Upstream-level buckets only.
	UrgentRoom map[string]float64 `json:"urgent_room,omitempty"`
}

func (s *Server) status(ctx context.Context) StatusResponse {
	now := s.clock.Now()
	out := StatusResponse{Time: now.UTC(), Upstreams: []UpstreamStatus{}, Clients: s.live.clients.list()}
	jobs := s.jobCountsFor(ctx)
	for _, name := range s.order {
		u := s.upstreams[name]
		st := UpstreamStatus{Name: name, Protocol: u.cfg.Protocol, Queued: map[string]int{}, OldestWait: map[string]float64{},
			Buckets: map[string]BucketStatus{}, BreakerHistory: []BreakerEventStatus{}, Jobs: jobs[name]}
		for _, f := range u.cfg.Fallbacks {
			st.Fallbacks = append(st.Fallbacks, f.Upstream)
		}
		if sn, ok := u.engine.(snapshotter); ok {
			snap := sn.Snapshot()
			for c, n := range snap.Queued {
				st.Queued[llm.Priority(c).String()] = n
			}
			st.InFlight, st.ConcurrencyLimit, st.RateScale = snap.InFlight, snap.ConcurrencyLimit, snap.RateScale
			for d, b := range snap.Buckets {
				if b.Capacity > 0 {
					bs := bucketStatus(flow.Dim(d), b)
					bs.Reserved = roundIn(flow.Dim(d), max(snap.Reserved[d], 0))
					for c, room := range snap.Room {
						if v := roundIn(flow.Dim(d), room[d]); v > 0 {
							if bs.UrgentRoom == nil {
								bs.UrgentRoom = map[string]float64{}
							}
							bs.UrgentRoom[llm.Priority(c).String()] = v
						}
					}
					st.Buckets[flow.Dim(d).String()] = bs
				}
			}
			if snap.PausedUntil.After(now) {
				t := snap.PausedUntil.UTC()
				st.PausedUntil = &t
			}
			st.Breaker = snap.Breaker.String()
			if !snap.BreakerReadyAt.IsZero() {
				t := snap.BreakerReadyAt.UTC()
				st.BreakerReadyAt = &t
			}
		}
		explain(&st, u.engine, now) // status_why.go
		st.OpenRequests, st.Oldest = s.live.upstream(name).openRequests(now, s.live.clients.configured)
		st.Keys = poolStatus(u, now)
		out.Upstreams = append(out.Upstreams, st)
	}
	out.Cluster = s.clusterStatus()
	out.ClientLimits = s.admit.ClientLimits(now)
	out.Spend = s.admit.Spend(now)
	return out
}

// serveStatus answers GET /v1/status. It reveals queue and quota state but
// no keys; with clients configured it needs a client key.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.clientSet().authenticate(r.Header)
	if !ok {
		writeStatusUnauthorized(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	st := s.status(r.Context())
	st.forCaller(cl.name, cl.admin)
	_ = enc.Encode(st)
}

// snapshotCollector turns the dispatchers' snapshots into gauges at scrape
// time, so nothing is sampled in the background.
type snapshotCollector struct{ s *Server }

var (
	descQueued = prometheus.NewDesc("sluice_queue_length", "Requests waiting in the queue, by class.",
		[]string{"upstream", "priority"}, nil)
	descInFlight = prometheus.NewDesc("sluice_in_flight_requests", "Requests being sent or streamed upstream.",
		[]string{"upstream"}, nil)
	descConcLimit = prometheus.NewDesc("sluice_concurrency_limit", "Adaptive concurrency limit.",
		[]string{"upstream"}, nil)
	descBucketLevel = prometheus.NewDesc("sluice_bucket_level", "Quota bucket room available now (may be negative), by dimension.",
		[]string{"upstream", "dimension"}, nil)
	descBucketLimit = prometheus.NewDesc("sluice_bucket_limit_per_minute", "Quota limit Sluice holds itself to, by dimension.",
		[]string{"upstream", "dimension"}, nil)
	descBreaker = prometheus.NewDesc("sluice_breaker_state", "Circuit breaker state: 1 for the current state.",
		[]string{"upstream", "state"}, nil)
	descPaused = prometheus.NewDesc("sluice_paused_seconds", "Seconds until the upstream's rate-limit pause ends (0 when not paused).",
		[]string{"upstream"}, nil)
	descOldestWait = prometheus.NewDesc("sluice_queue_oldest_wait_seconds", "How long the longest-waiting queued request of each class has waited (0 when the class is empty).",
		[]string{"upstream", "priority"}, nil)
)

var breakerStates = []flow.BreakerState{flow.Closed, flow.Open, flow.HalfOpen}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descInFlight, descConcLimit, descBucketLevel, descBucketLimit, descBreaker, descPaused, descOldestWait} {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.clock.Now()
	for _, name := range c.s.order {
		sn, ok := c.s.upstreams[name].engine.(snapshotter)
		if !ok {
			continue
		}
		snap := sn.Snapshot()
		for p, n := range snap.Queued {
			ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(n), name, llm.Priority(p).String())
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(snap.InFlight), name)
		ch <- prometheus.MustNewConstMetric(descConcLimit, prometheus.GaugeValue, float64(snap.ConcurrencyLimit), name)
		for d, b := range snap.Buckets {
			if b.Capacity <= 0 {
				continue
			}
			dim := flow.Dim(d).String()
			ch <- prometheus.MustNewConstMetric(descBucketLevel, prometheus.GaugeValue, b.Level, name, dim)
			ch <- prometheus.MustNewConstMetric(descBucketLimit, prometheus.GaugeValue, b.Capacity, name, dim)
		}
		for _, st := range breakerStates {
			v := 0.0
			if snap.Breaker == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, name, st.String())
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, max(snap.PausedUntil.Sub(now).Seconds(), 0), name)
		if ex, ok := c.s.upstreams[name].engine.(explainer); ok {
			x := ex.Explain()
			for p, at := range x.OldestArrival {
				v := 0.0
				if !at.IsZero() {
					v = max(now.Sub(at).Seconds(), 0)
				}
				ch <- prometheus.MustNewConstMetric(descOldestWait, prometheus.GaugeValue, v, name, llm.Priority(p).String())
			}
		}
	}
}

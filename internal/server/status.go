package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	// ClientLimits is each limited client's room on each upstream
	// (client_limits.go). Admin callers only.
	ClientLimits []ClientLimitStatus `json:"client_limits,omitempty"`
	// Spend is each client's spend and budget windows (status_spend.go).
	// Admin callers only.
	Spend *SpendStatus `json:"spend,omitempty"`
}

// forCaller drops the per-client sections a caller that is not an admin
// may not see (other clients' names and usage).
func (st *StatusResponse) forCaller(admin bool) {
	if !admin {
		st.ClientLimits = nil
		st.Spend = nil
	}
}

// UpstreamStatus is one upstream's scheduling state.
type UpstreamStatus struct {
	Name     string       `json:"name"`
	Protocol llm.Protocol `json:"protocol"`
	// Queued is the queue length per class.
	Queued map[string]int `json:"queued"`
	// InFlight and ConcurrencyLimit: requests being sent or streamed, and
	// the adaptive limit they are held to.
	InFlight         int `json:"in_flight"`
	ConcurrencyLimit int `json:"concurrency_limit"`
	// Buckets are the quota buckets that have a known limit, by dimension.
	Buckets map[string]BucketStatus `json:"buckets"`
	// PausedUntil is set while the upstream is paused after a rate limit.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// RateScale is the share of its limits the upstream refills at: below
	// 1 after an OpenAI "Slow Down", ramping back to 1 over 15 minutes.
	RateScale float64 `json:"rate_scale"`
	// Breaker is closed, open or half-open; BreakerReadyAt is when an open
	// breaker will let probes through.
	Breaker        string      `json:"breaker"`
	BreakerReadyAt *time.Time  `json:"breaker_ready_at,omitempty"`
	Keys           []KeyStatus `json:"keys,omitempty"` // the key pool (status_pool.go)
}

// BucketStatus is one quota bucket.
type BucketStatus struct {
	// LimitPerMinute is the limit Sluice holds itself to (after the safety
	// margin).
	LimitPerMinute float64 `json:"limit_per_minute"`
	// Depth is how much the bucket holds when full.
	Depth float64 `json:"depth"`
	// Level is the room available now; negative after an overrun.
	Level float64 `json:"level"`
}

func (s *Server) status() StatusResponse {
	now := s.clock.Now()
	out := StatusResponse{Time: now.UTC(), Upstreams: []UpstreamStatus{}}
	for _, name := range s.order {
		u := s.upstreams[name]
		st := UpstreamStatus{Name: name, Protocol: u.cfg.Protocol, Queued: map[string]int{}, Buckets: map[string]BucketStatus{}}
		if sn, ok := u.engine.(snapshotter); ok {
			snap := sn.Snapshot()
			for c, n := range snap.Queued {
				st.Queued[llm.Priority(c).String()] = n
			}
			st.InFlight, st.ConcurrencyLimit, st.RateScale = snap.InFlight, snap.ConcurrencyLimit, snap.RateScale
			for d, b := range snap.Buckets {
				if b.Capacity > 0 {
					st.Buckets[flow.Dim(d).String()] = BucketStatus{LimitPerMinute: b.Capacity, Depth: b.Depth, Level: b.Level}
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
		st.Keys = poolStatus(u, now)
		out.Upstreams = append(out.Upstreams, st)
	}
	out.Cluster = s.clusterStatus()
	out.ClientLimits = s.gates.status(now)
	out.Spend = s.spendStatus(now)
	return out
}

// serveStatus answers GET /v1/status. It reveals queue and quota state but
// no keys; with clients configured it needs a client key.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.clientSet().authenticate(r.Header)
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid or missing Sluice client key"}}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	st := s.status()
	st.forCaller(cl.admin)
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
)

var breakerStates = []flow.BreakerState{flow.Closed, flow.Open, flow.HalfOpen}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descInFlight, descConcLimit, descBucketLevel, descBucketLimit, descBreaker, descPaused} {
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
	}
}

package opsview

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// StatusResponse is the body of GET /v1/status: why requests are waiting.
type StatusResponse struct {
	Time      time.Time        `json:"time"`
	Upstreams []UpstreamStatus `json:"upstreams"`
	Cluster   *ClusterStatus   `json:"cluster,omitempty"` // status_cluster.go
	// Clients is each client's use of the gateway since it started.
	// Admin callers only.
	Clients []ClientUsage `json:"clients,omitempty"`
	// ClientLimits is each limited client's room on each upstream
	// (internal/admit). Admin callers only.
	ClientLimits []admit.ClientLimitStatus `json:"client_limits,omitempty"`
	// Spend is each client's spend and budget windows (internal/admit):
	// every client's for an admin, a client's own for any other caller.
	Spend *admit.SpendStatus `json:"spend,omitempty"`
	// Admission lists every kind of wait and refusal of the admission
	// layer since the gateway started, with its reason, count and last
	// message, the most recent first (admission_log.go): every client's
	// for an admin, a client's own for any other caller.
	Admission []AdmissionEvent `json:"admission"`
}

// ForCaller drops the per-client sections a caller that is not an admin
// may not see (other clients' names and usage): a client sees the holds
// of its own limits and its own spend only. name is the caller's client name.
func (st *StatusResponse) ForCaller(name string, admin bool) {
	if !admin {
		for i := range st.Upstreams {
			var own []HeldClient
			for _, h := range st.Upstreams[i].Held {
				if h.Client == name {
					own = append(own, h)
				}
			}
			st.Upstreams[i].Held = own
			if w := st.Upstreams[i].WaitingOn; w != nil && w.Client != name {
				cut := *w
				cut.Client, cut.Limit = "", ""
				st.Upstreams[i].WaitingOn = &cut
			}
		}
		st.ClientLimits = nil
		if st.Spend != nil { // its own spend and budget only
			own := &admit.SpendStatus{PricesAsOf: st.Spend.PricesAsOf, Clients: []admit.ClientSpend{}}
			for _, c := range st.Spend.Clients {
				if c.Client == name {
					own.Clients = append(own.Clients, c)
				}
			}
			st.Spend = own
		}
		st.Clients = nil
		own := []AdmissionEvent{}
		for _, e := range st.Admission {
			if e.Client == name {
				own = append(own, e)
			}
		}
		st.Admission = own
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
	Jobs *JobCounts `json:"jobs,omitempty"`
	// BatchRoute is what routing the upstream's work that could wait (its
	// jobs to its provider's Batch API, its answers in the flex tier)
	// answered, cost and saved since this gateway started (absent while
	// it routed nothing).
	BatchRoute *BatchRouteStatus `json:"batch_route,omitempty"`
	Keys       []KeyStatus       `json:"keys,omitempty"` // the key pool (status_pool.go)
	// CachedInputTokens sums the input tokens the upstream's answers
	// read from the provider's prompt cache (scheduled proxy requests).
	CachedInputTokens int64 `json:"cached_input_tokens"`
}

// BucketStatus is one quota bucket, in its dimension's unit (tokens or
// requests), rounded: whole tokens, requests to a tenth.
type BucketStatus struct {
	// LimitPerMinute is the limit Sluice holds itself to (after the safety
	// margin).
	LimitPerMinute float64 `json:"limit_per_minute"`
	// Depth is how much the bucket holds when full.
	Depth float64 `json:"depth"`
	// Level is the room available now (the dashboard's and `sluice
	// status`'s "available"; headroom is the share kept for more urgent
	// classes, UrgentRoom); negative after an
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

// Status is GET /v1/status's body, for an admin (ForCaller drops what
// another caller may not see); ctx bounds the job store's read.
func (v *View) Status(ctx context.Context) StatusResponse {
	now := v.clock.Now()
	out := StatusResponse{Time: now.UTC(), Upstreams: []UpstreamStatus{}, Clients: v.live.clients.list(),
		Admission: v.metrics.admit.log.list()}
	jobs := v.jobCountsFor(ctx)
	for _, u := range v.upstreams {
		name := u.Name
		e := v.engine(name)
		st := UpstreamStatus{Name: name, Protocol: u.Protocol, Queued: map[string]int{}, OldestWait: map[string]float64{},
			Buckets: map[string]BucketStatus{}, BreakerHistory: []BreakerEventStatus{}, Jobs: jobs[name]}
		for _, f := range u.Fallbacks {
			st.Fallbacks = append(st.Fallbacks, f.Upstream)
		}
		if lu := v.live.upstream(name); lu != nil {
			st.CachedInputTokens = lu.cached.Load()
		}
		st.BatchRoute = v.metrics.routed.get(name)
		if e != nil {
			snap := e.Snapshot()
			for c, n := range snap.Queued {
				st.Queued[llm.Priority(c).String()] = n
			}
			st.InFlight, st.ConcurrencyLimit, st.RateScale = snap.InFlight, snap.ConcurrencyLimit, snap.RateScale
			for d, b := range snap.Buckets {
				if b.Capacity > 0 {
					bs := bucketStatus(flow.Dim(d), b)
					bs.Reserved = roundIn(flow.Dim(d), max(snap.Reserved[d], 0))
					for c, room := range snap.Room {
						if r := roundIn(flow.Dim(d), room[d]); r > 0 {
							if bs.UrgentRoom == nil {
								bs.UrgentRoom = map[string]float64{}
							}
							bs.UrgentRoom[llm.Priority(c).String()] = r
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
			explain(&st, e, now) // status_why.go
		}
		st.OpenRequests, st.Oldest = v.live.upstream(name).openRequests(now, v.live.clientLabel)
		st.Keys = poolStatus(e, now)
		out.Upstreams = append(out.Upstreams, st)
	}
	out.Cluster = v.ClusterStatus()
	if v.admission != nil {
		out.ClientLimits = v.admission.ClientLimits(now)
		out.Spend = v.admission.Spend(now)
	}
	return out
}

package opsview

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// live holds what the dashboard shows that no Prometheus series gives
// cheaply: per upstream, counts of outcomes (read as rates by the history
// sampler) and the latencies of the requests finished since the last
// sample, per class; per client, usage. Every record is O(1) under a short
// lock or an atomic add; nothing blocks on I/O.
type live struct {
	ups     map[string]*liveUpstream
	clients clientUsage
}

// latencyReservoirMax bounds the latencies kept per class between two
// samples: past it, new ones replace old ones in a ring.
const latencyReservoirMax = 512

type liveUpstream struct {
	// Upstream attempts answered 2xx, 429 (or Slow Down) and overloaded,
	// requests shed, and requests admitted (sent, after their wait in the
	// queue).
	success, rate429, over529, shed, admitted atomic.Uint64
	// cached sums the input tokens answered requests read from the
	// provider's prompt cache.
	cached atomic.Int64

	mu        sync.Mutex
	latencies [llm.NumPriorities][]float64 // seconds, since the last take
	next      [llm.NumPriorities]int
	open      map[*openRequest]string // scheduled requests being served → their class as asked
}

// openRequest is a scheduled request being served (View.Serving).
type openRequest struct {
	id, client string
	start      time.Time
}

// openRequestsShown bounds the open requests /v1/status lists (the
// oldest).
const openRequestsShown = 10

// OpenRequest is a scheduled request the gateway is serving (queued, in
// flight or streaming), in /v1/status.
type OpenRequest struct {
	ID         string  `json:"id"`
	Client     string  `json:"client"`
	Priority   string  `json:"priority"`
	AgeSeconds float64 `json:"age_seconds"`
}

// opened and closed track a scheduled request while it is served.
func (u *liveUpstream) opened(rl *openRequest, priority string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.open == nil {
		u.open = map[*openRequest]string{}
	}
	u.open[rl] = priority
}

func (u *liveUpstream) closed(rl *openRequest) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.open, rl)
}

// openRequests returns how many requests are open and the oldest ones.
func (u *liveUpstream) openRequests(now time.Time, label func(string) string) (int, []OpenRequest) {
	if u == nil {
		return 0, nil
	}
	u.mu.Lock()
	out := make([]OpenRequest, 0, len(u.open))
	for rl, p := range u.open {
		out = append(out, OpenRequest{ID: rl.id, Client: label(rl.client), Priority: p,
			AgeSeconds: math.Round(max(now.Sub(rl.start).Seconds(), 0)*1000) / 1000})
	}
	u.mu.Unlock()
	slices.SortFunc(out, func(a, b OpenRequest) int { return cmp.Compare(b.AgeSeconds, a.AgeSeconds) })
	return len(out), out[:min(len(out), openRequestsShown)]
}

func newLive(upstreams, clients []string, anonymous string) *live {
	l := &live{ups: map[string]*liveUpstream{}}
	for _, u := range upstreams {
		l.ups[u] = &liveUpstream{}
	}
	l.clients.rows = map[string]*ClientUsage{}
	l.clients.setConfigured(clients)
	l.clients.anonymous = anonymous
	return l
}

func (l *live) upstream(name string) *liveUpstream {
	if l == nil {
		return nil
	}
	return l.ups[name]
}

// latency records one finished request's time in the gateway.
func (u *liveUpstream) latency(class llm.Priority, d time.Duration) {
	if u == nil || !class.Valid() {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	ls := u.latencies[class]
	if len(ls) < latencyReservoirMax {
		u.latencies[class] = append(ls, d.Seconds())
		return
	}
	ls[u.next[class]%latencyReservoirMax] = d.Seconds()
	u.next[class]++
}

// takeLatencies returns and clears the latencies recorded since the last
// take, sorted, per class.
func (u *liveUpstream) takeLatencies() [llm.NumPriorities][]float64 {
	u.mu.Lock()
	out := u.latencies
	u.latencies = [llm.NumPriorities][]float64{}
	u.next = [llm.NumPriorities]int{}
	u.mu.Unlock()
	for i := range out {
		slices.Sort(out[i])
	}
	return out
}

// quantile returns the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// Client label values beyond the configured names.
const (
	clientOther   = "other"   // a key not among the configured clients (open gateway)
	clientUnknown = "unknown" // refused before it was identified
)

// clientLabel keeps the client label bounded: a configured client's name,
// the anonymous client's for a keyless caller of an open gateway, "other"
// for any other key of an open gateway, "unknown" before authentication.
func (l *live) clientLabel(name string) string { return l.clients.label(name) }

func (c *clientUsage) label(name string) string {
	switch {
	case name == "":
		return clientUnknown
	case name == c.anonymous || slices.Contains(*c.configured.Load(), name):
		return name
	}
	return clientOther
}

// ClientUsage is one client's use of the gateway since it started, in
// /v1/status's clients section.
type ClientUsage struct {
	Client string `json:"client"`
	// Requests counts scheduled requests, Succeeded those answered 2xx,
	// Failed the others (upstream errors, give-ups, cancels).
	Requests  uint64 `json:"requests"`
	Succeeded uint64 `json:"succeeded"`
	Failed    uint64 `json:"failed"`
	// TokensIn and TokensOut are the usage the provider reported.
	TokensIn  int64 `json:"tokens_in"`
	TokensOut int64 `json:"tokens_out"`
	// TokensCached are the input tokens the provider served from its
	// prompt cache (Anthropic cache_read_input_tokens, OpenAI
	// cached_tokens).
	TokensCached int64      `json:"tokens_cached"`
	LastSeen     *time.Time `json:"last_seen,omitempty"`
}

type clientUsage struct {
	configured atomic.Pointer[[]string] // swapped when the clients change
	anonymous  string
	mu         sync.Mutex
	rows       map[string]*ClientUsage
}

// setConfigured names the clients the label and the usage list name.
func (c *clientUsage) setConfigured(names []string) {
	n := slices.Clone(names)
	c.configured.Store(&n)
}

func (c *clientUsage) record(a Answer, now time.Time) {
	name := c.label(a.Client)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rows[name]
	if r == nil {
		r = &ClientUsage{Client: name}
		c.rows[name] = r
	}
	r.Requests++
	if a.Succeeded {
		r.Succeeded++
	} else {
		r.Failed++
	}
	r.TokensIn += a.TokensIn
	r.TokensOut += a.TokensOut
	r.TokensCached += a.TokensCached
	t := now.UTC()
	r.LastSeen = &t
}

// list returns every client's usage: the configured ones first (in config
// order, zeros included), then the others by name.
func (c *clientUsage) list() []ClientUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	configured := *c.configured.Load()
	out := make([]ClientUsage, 0, len(c.rows)+len(configured))
	for _, n := range configured {
		if r := c.rows[n]; r != nil {
			out = append(out, *r)
		} else {
			out = append(out, ClientUsage{Client: n})
		}
	}
	var rest []string
	for n := range c.rows {
		if !slices.Contains(configured, n) {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	for _, n := range rest {
		out = append(out, *c.rows[n])
	}
	return out
}

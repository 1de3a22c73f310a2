package mock

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Counts are amounts per quota dimension. Tokens is input plus output (the
// OpenAI TPM dimension and Anthropic's tokens-* headers).
type Counts struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Tokens       int64 `json:"tokens"`
}

func (c *Counts) add(o Counts, sign int64) {
	c.Requests += sign * o.Requests
	c.InputTokens += sign * o.InputTokens
	c.OutputTokens += sign * o.OutputTokens
	c.Tokens += sign * o.Tokens
}

func (c *Counts) maxWith(o Counts) {
	c.Requests = max(c.Requests, o.Requests)
	c.InputTokens = max(c.InputTokens, o.InputTokens)
	c.OutputTokens = max(c.OutputTokens, o.OutputTokens)
	c.Tokens = max(c.Tokens, o.Tokens)
}

// Endpoints, as Stats name them (ScopeStats.ByEndpoint).
const (
	EndpointMessages    = "messages"         // POST /v1/messages
	EndpointCountTokens = "count_tokens"     // POST /v1/messages/count_tokens
	EndpointChat        = "chat_completions" // POST /v1/chat/completions
	EndpointResponses   = "responses"        // POST /v1/responses
	EndpointEmbeddings  = "embeddings"       // POST /v1/embeddings
	EndpointInputTokens = "input_tokens"     // POST /v1/responses/input_tokens
)

// CacheCounts sum the prompt-cache outcome of admitted requests. The share
// of input served from the cache is ReadTokens / PromptTokens.
type CacheCounts struct {
	// PromptTokens are all the input tokens of the requests (uncached, read
	// and written).
	PromptTokens int64 `json:"prompt_tokens"`
	// ReadTokens were served from the cache (Anthropic
	// cache_read_input_tokens, OpenAI cached_tokens).
	ReadTokens int64 `json:"read_tokens"`
	// WriteTokens were written to it (Anthropic
	// cache_creation_input_tokens; OpenAI writes are not reported), split by
	// TTL in Write5mTokens and Write1hTokens.
	WriteTokens   int64 `json:"write_tokens"`
	Write5mTokens int64 `json:"write_5m_tokens"`
	Write1hTokens int64 `json:"write_1h_tokens"`
	// Hits counts requests that read anything from the cache.
	Hits int64 `json:"hits"`
}

func (c *CacheCounts) add(o CacheCounts, sign int64) {
	c.PromptTokens += sign * o.PromptTokens
	c.ReadTokens += sign * o.ReadTokens
	c.WriteTokens += sign * o.WriteTokens
	c.Write5mTokens += sign * o.Write5mTokens
	c.Write1hTokens += sign * o.Write1hTokens
	if o.ReadTokens > 0 {
		c.Hits += sign
	}
}

// admitted describes an admitted request for the statistics.
type admitted struct {
	endpoint string
	tier     string // the service tier that served it
	cache    CacheCounts
}

// ScopeStats are the statistics of one API key, or of all keys together.
type ScopeStats struct {
	// ByStatus counts answers by HTTP status ("200", "429", …); a
	// connection reset counts as "reset".
	ByStatus map[string]int64 `json:"by_status"`
	// Admitted sums what admitted requests were finally charged, after
	// reconciliation (input tokens charged to ITPM, so cache reads are
	// excluded; output tokens actually produced). Added when a request ends.
	Admitted Counts `json:"admitted"`
	// Max60s is, per dimension, the most admitted in any sliding 60 s window
	// (0, 60 s], each admission counted at its admission time with its
	// final charge. Exact.
	Max60s Counts `json:"max_60s"`
	// InFlight is the number of admitted requests not yet finished.
	InFlight int64 `json:"in_flight"`
	// PeakInFlight is the most admitted requests ever in flight at once.
	PeakInFlight int64 `json:"peak_in_flight"`
	// FirstAdmission and LastAdmission bracket the admissions; nil before
	// the first.
	FirstAdmission *time.Time `json:"first_admission,omitempty"`
	LastAdmission  *time.Time `json:"last_admission,omitempty"`
	// ByEndpoint counts admitted requests by endpoint (EndpointMessages,
	// …). count_tokens and input_tokens requests are counted here only:
	// they take nothing from the model quotas that Admitted and Max60s
	// describe.
	ByEndpoint map[string]int64 `json:"by_endpoint"`
	// ByServiceTier counts admitted model requests by the service tier that
	// served them (Anthropic "standard"; OpenAI "default", "flex",
	// "priority", "scale").
	ByServiceTier map[string]int64 `json:"by_service_tier"`
	// Cache sums the prompt-cache outcome of admitted model requests.
	Cache CacheCounts `json:"cache"`
	// Batch is what the Batch APIs billed (batch.go): lines by outcome,
	// usage and cost of the succeeded ones. Batch lines are counted here
	// only, never in Admitted, Max60s or the endpoint and tier counts.
	Batch BatchStats `json:"batch"`
}

// Stats are the mock's statistics overall and per API key.
type Stats struct {
	Overall ScopeStats            `json:"overall"`
	Keys    map[string]ScopeStats `json:"keys"`
}

// statsWindow is how far sliding windows reach.
const statsWindow = 60 * time.Second

// Windows ending more than compactAfter before the newest admission are
// folded into a running maximum once more than compactAt events are held,
// bounding memory. An admission recorded later than that (a request running
// longer than compactAfter) still counts in later windows but no longer in
// the windows that end before it was recorded.
const (
	compactAt    = 1 << 16
	compactAfter = 2 * time.Minute
)

type event struct {
	t time.Time
	c Counts
}

// scope accumulates one ScopeStats.
type scope struct {
	mu         sync.Mutex
	byStatus   map[string]int64
	byEndpoint map[string]int64
	byTier     map[string]int64
	cache      CacheCounts
	admitted   Counts
	inFlight   int64
	peak       int64
	first      time.Time
	last       time.Time
	events     []event // sorted by t
	finalMax   Counts  // max over windows ending before finalUpTo
	finalUpTo  time.Time
	// nextCompact is the event count that triggers the next compaction; it
	// doubles with the live events so compaction stays amortized O(1).
	nextCompact int
}

func newScope() *scope {
	return &scope{byStatus: map[string]int64{}, byEndpoint: map[string]int64{}, byTier: map[string]int64{}}
}

func (s *scope) status(code string) {
	s.mu.Lock()
	s.byStatus[code]++
	s.mu.Unlock()
}

func (s *scope) countEndpoint(endpoint string) {
	s.mu.Lock()
	s.byEndpoint[endpoint]++
	s.mu.Unlock()
}

func (s *scope) admit(now time.Time, info admitted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byEndpoint[info.endpoint]++
	if info.tier != "" {
		s.byTier[info.tier]++
	}
	s.cache.add(info.cache, 1)
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	if s.first.IsZero() || now.Before(s.first) {
		s.first = now
	}
	if now.After(s.last) {
		s.last = now
	}
}

func (s *scope) finish(at time.Time, c Counts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	s.admitted.add(c, 1)
	i := len(s.events)
	for i > 0 && s.events[i-1].t.After(at) {
		i--
	}
	s.events = slices.Insert(s.events, i, event{at, c})
	if len(s.events) > max(compactAt, s.nextCompact) {
		s.compact()
		s.nextCompact = 2 * len(s.events)
	}
}

// correct takes c back from a request already finished at at (a cancelled
// background response gives back the output it did not produce).
func (s *scope) correct(at time.Time, c Counts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitted.add(c, -1)
	neg := Counts{}
	neg.add(c, -1)
	i := len(s.events)
	for i > 0 && s.events[i-1].t.After(at) {
		i--
	}
	s.events = slices.Insert(s.events, i, event{at, neg})
}

// windowMax returns the most counted in any window (t−60s, t] ending at an
// event at or after from. s.mu must be held.
func (s *scope) windowMax(from, until time.Time) Counts {
	var best, sum Counts
	i := 0
	for k, e := range s.events {
		if !until.IsZero() && !e.t.Before(until) {
			break
		}
		sum.add(e.c, 1)
		for s.events[i].t.Compare(e.t.Add(-statsWindow)) <= 0 {
			sum.add(s.events[i].c, -1)
			i++
		}
		// Windows end after the last event of an instant, so that a
		// correction recorded at the same instant is taken into account.
		if k+1 < len(s.events) && s.events[k+1].t.Equal(e.t) {
			continue
		}
		if !e.t.Before(from) {
			best.maxWith(sum)
		}
	}
	return best
}

// compact folds old windows into finalMax and drops events no later window
// can reach. s.mu must be held.
func (s *scope) compact() {
	b := s.events[len(s.events)-1].t.Add(-compactAfter)
	if !b.After(s.finalUpTo) {
		return
	}
	s.finalMax.maxWith(s.windowMax(s.finalUpTo, b))
	s.finalUpTo = b
	cut := b.Add(-statsWindow)
	k := 0
	for k < len(s.events) && !s.events[k].t.After(cut) {
		k++
	}
	s.events = slices.Delete(s.events, 0, k)
}

func (s *scope) snapshot() ScopeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ScopeStats{ByStatus: maps.Clone(s.byStatus), Admitted: s.admitted,
		InFlight: s.inFlight, PeakInFlight: s.peak, ByEndpoint: maps.Clone(s.byEndpoint),
		ByServiceTier: maps.Clone(s.byTier), Cache: s.cache}
	out.Max60s = s.finalMax
	out.Max60s.maxWith(s.windowMax(s.finalUpTo, time.Time{}))
	if !s.first.IsZero() {
		f, l := s.first, s.last
		out.FirstAdmission, out.LastAdmission = &f, &l
	}
	return out
}

// statsBook holds the overall scope and one per API key.
type statsBook struct {
	mu      sync.RWMutex // guards the pointers, not the scopes
	overall *scope
	keys    map[string]*scope
}

func newStatsBook() *statsBook { return &statsBook{overall: newScope(), keys: map[string]*scope{}} }

// scopes returns the overall scope and key's scope (nil for no key).
func (b *statsBook) scopes(key string) (*scope, *scope) {
	b.mu.RLock()
	o, k := b.overall, b.keys[key]
	b.mu.RUnlock()
	if k != nil || key == "" {
		return o, k
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k = b.keys[key]; k == nil {
		k = newScope()
		b.keys[key] = k
	}
	return b.overall, k
}

func (b *statsBook) status(key string, code int) {
	c := strconv.Itoa(code)
	if code == 0 {
		c = "reset"
	}
	o, k := b.scopes(key)
	o.status(c)
	if k != nil {
		k.status(c)
	}
}

// ticket remembers where an admitted request was counted, so its finish
// lands in the same scopes even across a reset.
type ticket struct {
	overall, key *scope
	at           time.Time
}

func (b *statsBook) admit(key string, now time.Time, info admitted) ticket {
	o, k := b.scopes(key)
	o.admit(now, info)
	if k != nil {
		k.admit(now, info)
	}
	return ticket{o, k, now}
}

// endpoint counts an answered request that takes no model quota
// (count_tokens, input_tokens).
func (b *statsBook) endpoint(key, endpoint string) {
	o, k := b.scopes(key)
	o.countEndpoint(endpoint)
	if k != nil {
		k.countEndpoint(endpoint)
	}
}

// finish records an admitted request's final charge at its admission time.
func (t ticket) finish(c Counts) {
	t.overall.finish(t.at, c)
	if t.key != nil {
		t.key.finish(t.at, c)
	}
}

// correct takes c back from a finished request's charge.
func (t ticket) correct(c Counts) {
	t.overall.correct(t.at, c)
	if t.key != nil {
		t.key.correct(t.at, c)
	}
}

func (b *statsBook) snapshot() Stats {
	b.mu.RLock()
	o := b.overall
	keys := make(map[string]*scope, len(b.keys))
	for k, v := range b.keys {
		keys[k] = v
	}
	b.mu.RUnlock()
	st := Stats{Overall: o.snapshot(), Keys: make(map[string]ScopeStats, len(keys))}
	for k, v := range keys {
		st.Keys[k] = v.snapshot()
	}
	return st
}

// reset starts every scope afresh. Requests in flight keep their old scopes
// and are not counted in the new ones.
func (b *statsBook) reset() {
	b.mu.Lock()
	b.overall, b.keys = newScope(), map[string]*scope{}
	b.mu.Unlock()
}

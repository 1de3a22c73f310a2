package dispatch

import (
	"bytes"
	"container/list"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Prompt caching as the provider counts it (docs/pools.md, "Prompt caching
// and key affinity"). A provider's prompt cache belongs to one key: a
// request whose prefix the same key sent within the cache's lifetime reads
// it from the cache. Each key keeps a bounded record of the prefixes it
// sent (the hash of each block boundary a provider may cache, with when
// it expires, and its tokens as the provider counted them), written when
// an answer's usage shows the provider cached it, so:
//
//   - admission charges a request on a key what the provider will count
//     there: on Anthropic, whose ITPM leaves out cache reads (but for the
//     models of provider.CacheReadsCountTowardITPM), the input minus the
//     prefix the key holds; everywhere else the whole input (OpenAI's TPM
//     counts cached tokens). The reservation is settled with the reported
//     usage as any other (provider.RateLimitedInputTokens).
//   - affinity keeps the requests of a session (metadata.user_id,
//     prompt_cache_key, user, X-Sluice-Session) on the key the session
//     last went to, unless that key cannot admit them before their
//     deadline while another key can; a request without a session goes
//     to the key holding the longest part of its prefix when that key has
//     room now. A session's first request takes the key with the most
//     room, so sessions spread over the pool even when they share a
//     prefix one key cached first (waiting for that key would put every
//     session on it: docs/pools.md measures it).
//
// A prefix is recorded only once an answer reported it cached (or, on
// OpenAI, whose writes are silent, once a cacheable prompt was answered),
// and expires CacheExpiryMargin before the provider's TTL, counted from
// when the request was sent: a request sent while the first one is still
// in flight is charged whole, so the discount never counts a cache entry
// the provider may not have.

// CacheExpiryMargin is how long before the provider's TTL (counted from
// the send) a recorded prefix is treated as expired: the provider counts
// its TTL from when it processed the request, a little after the send, and
// the margin covers a clock that drifts.
const CacheExpiryMargin = 5 * time.Second

// openAICacheTTL is how long an OpenAI prefix is assumed cached after its
// last use: the low end of "5 to 10 minutes of inactivity".
const openAICacheTTL = 5 * time.Minute

// expiring is an LRU-bounded map of names to values with an expiry;
// safe for concurrent use. Its zero value is unusable: newExpiring.
type expiring[V any] struct {
	mu    sync.Mutex
	limit int
	order *list.List // front: most recently used; elements hold *expEntry[V]
	m     map[string]*list.Element
}

type expEntry[V any] struct {
	name  string
	v     V
	until time.Time
}

func newExpiring[V any](limit int) *expiring[V] {
	return &expiring[V]{limit: max(limit, 1), order: list.New(), m: map[string]*list.Element{}}
}

// get returns name's value when it has not expired at now.
func (e *expiring[V]) get(name string, now time.Time) (V, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var zero V
	el, ok := e.m[name]
	if !ok {
		return zero, false
	}
	x := el.Value.(*expEntry[V])
	if !now.Before(x.until) {
		e.order.Remove(el)
		delete(e.m, name)
		return zero, false
	}
	e.order.MoveToFront(el)
	return x.v, true
}

// put sets name to v until until (a later expiry it had is kept when keep
// is set), dropping the least recently used names over the limit.
func (e *expiring[V]) put(name string, v V, until time.Time, keepLater bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.m[name]; ok {
		x := el.Value.(*expEntry[V])
		x.v = v
		if !keepLater || until.After(x.until) {
			x.until = until
		}
		e.order.MoveToFront(el)
		return
	}
	e.m[name] = e.order.PushFront(&expEntry[V]{name: name, v: v, until: until})
	for e.order.Len() > e.limit {
		old := e.order.Back()
		e.order.Remove(old)
		delete(e.m, old.Value.(*expEntry[V]).name)
	}
}

// remove forgets name.
func (e *expiring[V]) remove(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.m[name]; ok {
		e.order.Remove(el)
		delete(e.m, name)
	}
}

// len is how many names it holds, expired ones included.
func (e *expiring[V]) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}

// promptCache is what a waiter's body says about the provider's cache.
type promptCache struct {
	prefix  provider.CachePrefix
	has     bool   // the body has a cacheable prefix
	session string // its session marker ("" none)
	// discount is set when a cache read is left out of the input the
	// provider rate-limits (Anthropic, but for the † models) and the
	// upstream's prompt_cache.admission is on.
	discount bool
}

// cacheOf reads what req's body says about the provider's cache.
func (d *Dispatcher) cacheOf(req *Request) promptCache {
	var pc promptCache
	if len(req.Body) == 0 {
		return pc
	}
	path := req.Path
	for i := range len(path) {
		if path[i] == '?' {
			path = path[:i]
			break
		}
	}
	e, ok := provider.EndpointOf(d.cfg.Protocol, path)
	if !ok || e == provider.EndpointEmbeddings || e == provider.EndpointCountTokens {
		return pc
	}
	// Cheap looks first: most bodies name no session, and an Anthropic
	// body without cache_control (or an OpenAI one far shorter than the
	// shortest cacheable prompt) has no prefix to read.
	pc.session = req.Session
	if pc.session == "" && (bytes.Contains(req.Body, []byte(`"user_id"`)) || bytes.Contains(req.Body, []byte(`"prompt_cache_key"`)) ||
		bytes.Contains(req.Body, []byte(`"user"`))) {
		pc.session = provider.SessionOf(d.cfg.Protocol, req.Body)
	}
	if d.cfg.Protocol == llm.Anthropic && !bytes.Contains(req.Body, []byte(`"cache_control"`)) ||
		d.cfg.Protocol != llm.Anthropic && int64(len(req.Body)) < provider.OpenAICacheMinTokens*2 {
		return pc
	}
	pc.prefix, ok = provider.CachePrefixOf(d.cfg.Protocol, e, req.Body, nil)
	pc.has = ok && pc.prefix.Cacheable
	pc.discount = pc.has && d.cfg.Protocol == llm.Anthropic && !provider.CacheReadsCountTowardITPM(req.Cost.Model) &&
		d.cfg.PromptCache.On(d.cfg.PromptCache.Admission)
	return pc
}

// minCacheable is the shortest prefix the provider caches for w's model.
func (d *Dispatcher) minCacheable(w *waiter) int64 {
	return provider.MinCacheableTokens(d.cfg.Protocol, w.req.Cost.Model)
}

// cachedOn is how many of w's prefix tokens key k holds in its cache at
// now, as the provider looks them up and counts them: the longest
// recorded block boundary (on Anthropic, within AnthropicLookbackBlocks
// before one of the request's breakpoints), with the tokens the
// provider's usage reported for it.
func (d *Dispatcher) cachedOn(k *poolKey, w *waiter, now time.Time) int64 {
	pc := &w.cache
	if !pc.has || k.prefixes == nil {
		return 0
	}
	blocks := pc.prefix.Blocks
	floor := d.minCacheable(w)
	// reach[i]: a breakpoint at or after i within the lookback.
	nextBP := -1
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if b.TTL > 0 {
			nextBP = i
		}
		if b.Tokens < floor {
			break // shorter prefixes are never cached
		}
		if d.cfg.Protocol == llm.Anthropic && (nextBP < 0 || nextBP-i > provider.AnthropicLookbackBlocks) {
			continue
		}
		if n, ok := k.prefixes.get(b.Hash, now); ok {
			return n
		}
	}
	return 0
}

// costOn is what w reserves on key k at now: its estimate, less the
// prefix k holds in its cache (in the provider's own count of it) when
// the provider leaves cache reads out of its input limit.
func (d *Dispatcher) costOn(k *poolKey, w *waiter, now time.Time) flow.Amount {
	c := w.full
	if !w.cache.discount {
		return c
	}
	read := min(float64(d.cachedOn(k, w, now)), c[flow.InputTokens])
	if read <= 0 {
		return c
	}
	c[flow.InputTokens] -= read
	c[flow.Tokens] = max(c[flow.Tokens]-read, 0)
	return c
}

// affine is the key w should stay on, nil when none (or affinity is off):
// its session's key (wait set: w may wait for it), else, for a request
// without a session, the key holding the longest part of its prefix (a
// preference when it has room now). A session not seen yet has none.
func (d *Dispatcher) affine(w *waiter, now time.Time) (k *poolKey, wait bool) {
	if len(d.keys) < 2 || !d.cfg.PromptCache.On(d.cfg.PromptCache.Affinity) {
		return nil, false
	}
	if w.cache.session != "" {
		if k, ok := d.sessions.get(w.cache.session, now); ok {
			return k, true
		}
		return nil, false
	}
	var most int64
	for _, key := range d.keys {
		if n := d.cachedOn(key, w, now); n > most {
			k, most = key, n
		}
	}
	return k, false
}

// noteCached records on w's key what its answer says the provider
// cached, from its send at sent: the prefix up to each breakpoint the
// provider wrote or read (Anthropic: the usage reports cache creation or
// reads), every boundary of a cacheable prompt (OpenAI, whose writes are
// silent); and its session's key. A prefix the key was thought to hold
// but the answer read nothing of is forgotten.
func (d *Dispatcher) noteCached(k *poolKey, w *waiter, u llm.Usage, sent time.Time) {
	pc := &w.cache
	if k == nil || sent.IsZero() {
		return
	}
	if pc.session != "" && d.sessions != nil {
		ttl := pc.prefix.TTL
		if ttl == 0 {
			ttl = openAICacheTTL
		}
		d.sessions.put(pc.session, k, sent.Add(ttl), false)
	}
	if !pc.has || k.prefixes == nil {
		return
	}
	floor := d.minCacheable(w)
	blocks := pc.prefix.Blocks
	if d.cfg.Protocol != llm.Anthropic {
		until := sent.Add(openAICacheTTL - CacheExpiryMargin)
		for _, b := range blocks {
			if b.Tokens >= floor {
				k.prefixes.put(b.Hash, b.Tokens, until, true)
			}
		}
		return
	}
	cached := max(u.CacheReadInputTokens, 0) + max(u.CacheCreationInputTokens, 0)
	if cached == 0 || len(blocks) == 0 {
		// Nothing read or written: what the record said it held is gone.
		for _, b := range blocks {
			k.prefixes.remove(b.Hash)
		}
		return
	}
	// Every breakpoint reaching the minimum was written or refreshed,
	// through the last, whose prefix the provider counted as read +
	// written: each breakpoint's tokens are its estimate in that scale
	// (a read refreshes the entry it hit: the longest one).
	scale := float64(cached) / float64(max(blocks[len(blocks)-1].Tokens, 1))
	for _, b := range blocks {
		if b.TTL > 0 && b.Tokens >= floor {
			n := min(int64(float64(b.Tokens)*scale), cached)
			k.prefixes.put(b.Hash, n, sent.Add(b.TTL-CacheExpiryMargin), true)
		}
	}
}

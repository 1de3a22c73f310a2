package mock

import (
	"strings"
	"time"
)

// The simulated prompt caches (docs/mock.md "Prompt caching"). Each API key
// has its own cache per protocol: a request on another key is a miss, as a
// request from another organization (OpenAI) or workspace (Anthropic) is.
// Entries are prefix hashes (prompt.go) with an expiry; a hit refreshes it.
// Only admitted requests read or write: the plan is made before admission
// and committed with it.

// Cache TTLs.
const (
	// cacheTTL5m is Anthropic's default ephemeral TTL, refreshed on every
	// hit.
	cacheTTL5m = 5 * time.Minute
	// cacheTTL1h is Anthropic's "ttl": "1h".
	cacheTTL1h = time.Hour
	// openAICacheTTL is how long an OpenAI prefix stays cached without use
	// (in-memory retention: "5 to 10 minutes of inactivity, up to a maximum
	// of one hour"; the mock takes the low end and refreshes on hits).
	openAICacheTTL = 5 * time.Minute
	// openAICacheTTLExtended is prompt_cache_retention "24h".
	openAICacheTTLExtended = 24 * time.Hour
)

// OpenAI caches prompts of 1024 tokens or more, with hits in increments of
// 128 tokens; in the mock's bytes (4 per token) that is 4096, then every 512.
const (
	openAICacheMinTokens  = 1024
	openAICacheStepTokens = 128
)

// anthropicLookback is how many blocks before a breakpoint Anthropic checks
// for a hit ("approximately 20 content blocks").
const anthropicLookback = 20

// maxAnthropicBreakpoints is the most cache_control blocks a request may
// have.
const maxAnthropicBreakpoints = 4

// anthropicMinCacheable is Anthropic's minimum cacheable prompt length per
// model, matched by name fragment, first match wins (prompt-caching page,
// "Cache limitations", 2026 revision: 512 for the 5.x models but Sonnet 5;
// 2,048 for Opus 4.7, Mythos Preview and Haiku 3.5; 4,096 for Opus 4.6, Opus
// 4.5 and Haiku 4.5; 1,024 for the rest). A prefix shorter than its model's
// minimum is never cached.
var anthropicMinCacheable = []struct {
	fragment string
	tokens   int64
}{
	{"sonnet-5-5", 512},
	{"opus-5", 512},
	{"fable-5", 512},
	{"mythos-5", 512},
	{"haiku-5", 512},
	{"sonnet-5", 1024},
	{"mythos-preview", 2048},
	{"opus-4-7", 2048},
	{"opus-4-6", 4096},
	{"opus-4-5", 4096},
	{"haiku-4-5", 4096},
	{"3-5-haiku", 2048},
	{"haiku-3-5", 2048},
	{"3-haiku", 2048},
	{"haiku-3", 2048},
}

// anthropicMinCacheableDefault covers every other model (Opus 4.8, Sonnet
// 4.x, Opus 4.1, Opus 4, Sonnet 3.7 and unknown names).
const anthropicMinCacheableDefault = 1024

func minCacheable(model string) int64 {
	for _, m := range anthropicMinCacheable {
		if strings.Contains(model, m.fragment) {
			return m.tokens
		}
	}
	return anthropicMinCacheableDefault
}

// cacheReadsCountTowardITPM lists the models whose ITPM limit also counts
// cache_read_input_tokens: the ones marked † in the rate-limit tables
// (Claude Haiku 3.5, and Haiku 3 in the 2025 revision). For every other
// model only input_tokens + cache_creation_input_tokens count.
var cacheReadsCountTowardITPM = []string{"3-5-haiku", "haiku-3-5", "3-haiku", "haiku-3"}

func countsCacheReads(model string) bool {
	for _, f := range cacheReadsCountTowardITPM {
		if strings.Contains(model, f) {
			return true
		}
	}
	return false
}

// maxCacheEntries bounds one key's cache: when full, expired entries are
// dropped, and if that is not enough, everything is (as if it all expired).
const maxCacheEntries = 100_000

type cacheEntry struct {
	expires time.Time
	ttl     time.Duration
}

// promptCache is one key's cache on one protocol. The owning keyState's
// lock guards it.
type promptCache struct {
	entries map[uint64]cacheEntry
}

// alive reports whether h is cached at now.
func (c *promptCache) alive(h uint64, now time.Time) bool {
	e, ok := c.entries[h]
	return ok && now.Before(e.expires)
}

// touch refreshes a live entry for its own TTL.
func (c *promptCache) touch(h uint64, now time.Time) {
	if e, ok := c.entries[h]; ok && now.Before(e.expires) {
		e.expires = now.Add(e.ttl)
		c.entries[h] = e
	}
}

// put writes (or refreshes) h for ttl, keeping a longer TTL it had.
func (c *promptCache) put(h uint64, ttl time.Duration, now time.Time) {
	if c.entries == nil {
		c.entries = map[uint64]cacheEntry{}
	}
	if e, ok := c.entries[h]; ok && now.Before(e.expires) && e.ttl > ttl {
		ttl = e.ttl
	}
	if len(c.entries) >= maxCacheEntries {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCacheEntries {
			clear(c.entries)
		}
	}
	c.entries[h] = cacheEntry{expires: now.Add(ttl), ttl: ttl}
}

// cacheWrite is one prefix to write when the request is admitted.
type cacheWrite struct {
	hash uint64
	ttl  time.Duration
}

// cachePlan is how a prompt's input divides between the cache and the rest,
// and what admitting it reads and writes.
type cachePlan struct {
	total   int64 // every input token
	read    int64 // served from the cache
	write5m int64 // written with a 5-minute TTL
	write1h int64 // written with a 1-hour TTL
	hit     uint64
	hasHit  bool
	writes  []cacheWrite
}

// uncached is the input neither read nor written (Anthropic input_tokens).
func (p cachePlan) uncached() int64 { return p.total - p.read - p.write5m - p.write1h }

func (p cachePlan) writesTotal() int64 { return p.write5m + p.write1h }

// commit refreshes the hit and makes the writes.
func (p cachePlan) commit(c *promptCache, now time.Time) {
	if p.hasHit {
		c.touch(p.hit, now)
	}
	for _, w := range p.writes {
		c.put(w.hash, w.ttl, now)
	}
}

// planAnthropic applies Anthropic's rules: the longest cached prefix ending
// at a block boundary within anthropicLookback blocks before a breakpoint is
// read; every breakpoint after it whose prefix reaches the model's minimum
// is written, the 1-hour ones first (a 1h breakpoint may not follow a 5m
// one): tokens up to the last 1h write count as 1h writes, the rest up to
// the last breakpoint as 5m writes, and input_tokens is what follows.
func planAnthropic(c *promptCache, p *prompt, now time.Time) cachePlan {
	plan := cachePlan{total: p.tokens()}
	bps := p.breakpoints()
	if len(bps) == 0 {
		return plan
	}
	pre := p.blockPrefixes()
	hitAt := -1
	for _, b := range bps {
		for j := b; j >= max(0, b-anthropicLookback); j-- {
			if j > hitAt && c.alive(pre[j].hash, now) {
				hitAt = j
				break
			}
		}
	}
	if hitAt >= 0 {
		plan.read = pre[hitAt].tokens()
		plan.hit, plan.hasHit = pre[hitAt].hash, true
	}
	floor := minCacheable(p.model)
	end1h, end := plan.read, plan.read
	for _, b := range bps {
		if b <= hitAt || pre[b].tokens() < floor {
			continue
		}
		ttl := p.blocks[b].ttl
		plan.writes = append(plan.writes, cacheWrite{pre[b].hash, ttl})
		end = pre[b].tokens()
		if ttl >= cacheTTL1h {
			end1h = end
		}
	}
	plan.write1h = end1h - plan.read
	plan.write5m = end - end1h
	return plan
}

// planOpenAI applies OpenAI's automatic prefix caching: the prompt's
// leading 1024 tokens and every further 128 are cacheable prefixes; the
// longest one cached is read (cached_tokens), and all are written for ttl.
// Writes are free and reported nowhere (cache_write_tokens is 0: the
// pre-GPT-5.6 behaviour).
func planOpenAI(c *promptCache, p *prompt, ttl time.Duration, now time.Time) cachePlan {
	plan := cachePlan{total: p.tokens()}
	chunks := p.chunkPrefixes(openAICacheMinTokens*4, openAICacheStepTokens*4)
	for i := len(chunks) - 1; i >= 0; i-- {
		if c.alive(chunks[i].hash, now) {
			plan.read = chunks[i].tokens()
			plan.hit, plan.hasHit = chunks[i].hash, true
			break
		}
	}
	for _, x := range chunks {
		plan.writes = append(plan.writes, cacheWrite{x.hash, ttl})
	}
	return plan
}

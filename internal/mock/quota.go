package mock

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// quotas holds the buckets of every API key, per protocol. Each key has its
// own lock, so keys never contend with each other.
type quotas struct {
	limits        Limits
	burstSeconds  float64
	realtime      bool
	countRejected bool
	keys          sync.Map // scope + "\x00" + key → *keyState
	// accountOf maps a key to its account (keys.go); accountLimits are
	// the accounts' limits. Read-only after New.
	accountOf     map[string]string
	accountLimits map[string]Limits
}

// keyState is one API key's buckets in one quota scope. Anthropic uses req,
// in and out; OpenAI uses req and tok; count_tokens uses req. cache is the
// key's prompt cache on that protocol.
type keyState struct {
	mu    sync.Mutex
	req   bucket
	in    bucket
	out   bucket
	tok   bucket
	cache promptCache
}

// Quota scopes: a protocol's model endpoints share one set of buckets;
// token counting has its own on each protocol (Anthropic: "Token counting
// and message creation have separate and independent rate limits"; the
// mock treats OpenAI's responses/input_tokens alike).
const (
	scopeAnthropic   = protoAnthropic
	scopeOpenAI      = protoOpenAI
	scopeCountTokens = "anthropic-count_tokens"
	scopeInputTokens = "openai-input_tokens"
)

// limitsFor is what of l applies in scope.
func limitsFor(scope string, l Limits) Limits {
	if scope == scopeCountTokens || scope == scopeInputTokens {
		return Limits{RPM: l.CountTokensRPM}
	}
	return l
}

func (q *quotas) newState(scope string, l Limits, now time.Time) *keyState {
	l = limitsFor(scope, l)
	return &keyState{
		req: newBucket(l.RPM, q.burstSeconds, now),
		in:  newBucket(l.ITPM, q.burstSeconds, now),
		out: newBucket(l.OTPM, q.burstSeconds, now),
		tok: newBucket(l.TPM, q.burstSeconds, now),
	}
}

func (q *quotas) state(scope, key string, now time.Time) *keyState {
	k := scope + "\x00" + key
	if v, ok := q.keys.Load(k); ok {
		return v.(*keyState)
	}
	v, _ := q.keys.LoadOrStore(k, q.newState(scope, q.limits, now))
	return v.(*keyState)
}

// reset forgets every key: buckets start full again and caches empty.
func (q *quotas) reset() { q.keys.Clear() }

// admission is the outcome of an admission check.
type admission struct {
	ok bool
	// On refusal: the most violated dimension, its limit, how long until the
	// request would fit, and (OpenAI) used/need for the message.
	dim      string
	limit    int64
	wait     time.Duration
	used     int64
	need     int64
	tooLarge bool
	// On success: the input split (Anthropic inputTokens is the uncached
	// remainder; OpenAI's is every input token, cacheRead among them) and
	// what was charged to the input dimension.
	inputTokens int64
	cacheRead   int64
	cacheCreate int64
	cache5m     int64
	cache1h     int64
	inCharged   int64
	reserved    int64 // output tokens (or TPM tokens) reserved at admission
	header      http.Header
}

type dimCheck struct {
	b     *bucket
	need  float64
	name  string
	field string // OpenAI error type
}

// worst returns the check with the longest wait, or -1 when all fit.
func worst(checks []dimCheck) (int, time.Duration) {
	idx, longest := -1, time.Duration(0)
	for i, c := range checks {
		if c.b.deficit(c.need) > 0 {
			if w := c.b.wait(c.need); idx < 0 || w > longest {
				idx, longest = i, w
			}
		}
	}
	return idx, longest
}

func (q *quotas) admitAnthropic(key string, r request, now time.Time) admission {
	ks := q.state(scopeAnthropic, key, now)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.req.refill(now)
	ks.in.refill(now)
	ks.out.refill(now)
	plan := planAnthropic(&ks.cache, r.prompt, now)
	a := admission{inputTokens: plan.uncached(), cacheRead: plan.read, cacheCreate: plan.writesTotal(),
		cache5m: plan.write5m, cache1h: plan.write1h}
	// ITPM counts input_tokens + cache_creation_input_tokens, and cache
	// reads only for the models of cacheReadsCountTowardITPM.
	a.inCharged = a.inputTokens + a.cacheCreate
	if countsCacheReads(r.model) {
		a.inCharged += a.cacheRead
	}
	outNeed := float64(r.maxTokens)
	if q.realtime {
		outNeed = 1 // realtime: admission only needs the bucket above zero
	}
	checks := []dimCheck{
		{&ks.req, 1, "requests", ""},
		{&ks.in, float64(a.inCharged), "input tokens", ""},
		{&ks.out, outNeed, "output tokens", ""},
	}
	acct := q.account(scopeAnthropic, key, now)
	if acct != nil {
		acct.mu.Lock()
		defer acct.mu.Unlock()
		acct.req.refill(now)
		acct.in.refill(now)
		acct.out.refill(now)
		checks = append(checks, dimCheck{&acct.req, 1, "requests", ""}, dimCheck{&acct.in, float64(a.inCharged), "input tokens", ""},
			dimCheck{&acct.out, outNeed, "output tokens", ""})
	}
	if i, _ := worst(checks); i >= 0 {
		if q.countRejected {
			ks.req.chargeRejected()
		}
		// The wait is taken after the rejected request's own charge, so
		// retry-after stays true.
		i, w := worst(checks)
		a.dim, a.limit, a.wait = checks[i].name, int64(checks[i].b.limit), w
		a.header = ks.anthropicHeaders(now)
		return a
	}
	a.ok = true
	ks.req.charge(1)
	ks.in.charge(float64(a.inCharged))
	if acct != nil {
		acct.req.charge(1)
		acct.in.charge(float64(a.inCharged))
	}
	if !q.realtime {
		a.reserved = r.maxTokens
		ks.out.charge(float64(r.maxTokens))
		if acct != nil {
			acct.out.charge(float64(r.maxTokens))
		}
	}
	plan.commit(&ks.cache, now)
	a.header = ks.anthropicHeaders(now)
	return a
}

// admitCountTokens takes one request from key's token-counting bucket in
// scope (scopeCountTokens, scopeInputTokens), and its account's.
func (q *quotas) admitCountTokens(scope, key string, now time.Time) admission {
	ks := q.state(scope, key, now)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.req.refill(now)
	checks := []dimCheck{{&ks.req, 1, "requests", ""}}
	headers := func() http.Header {
		if scope == scopeInputTokens {
			return ks.openAIHeaders()
		}
		return ks.anthropicHeaders(now)
	}
	if acct := q.account(scope, key, now); acct != nil {
		acct.mu.Lock()
		defer acct.mu.Unlock()
		acct.req.refill(now)
		checks = append(checks, dimCheck{&acct.req, 1, "requests", ""})
	}
	var a admission
	if i, _ := worst(checks); i >= 0 {
		if q.countRejected {
			ks.req.chargeRejected()
		}
		i, w := worst(checks)
		b := checks[i].b
		a.dim, a.limit, a.wait = checks[i].name, int64(b.limit), w
		a.used = int64(math.Round(b.limit - b.level))
		a.header = headers()
		return a
	}
	a.ok = true
	for _, c := range checks {
		c.b.charge(1)
	}
	a.header = headers()
	return a
}

// chargeOutput charges delta output tokens (negative refunds) to key's
// output bucket (Anthropic OTPM, OpenAI TPM): the reconciliation of a
// reservation at the end of a reply, or realtime charging as tokens are
// produced.
func (q *quotas) chargeOutput(scope, key string, delta int64, now time.Time) {
	pick := func(ks *keyState) *bucket {
		if scope == scopeOpenAI {
			return &ks.tok
		}
		return &ks.out
	}
	ks := q.state(scope, key, now)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	b := pick(ks)
	b.refill(now)
	b.charge(float64(delta))
	if acct := q.account(scope, key, now); acct != nil {
		acct.mu.Lock()
		defer acct.mu.Unlock()
		ab := pick(acct)
		ab.refill(now)
		ab.charge(float64(delta))
	}
}

// admitOpenAI admits a Chat Completions, Responses or embeddings request:
// 1 request and input + n × maxTokens TPM tokens. With cache, the prompt's
// prefix is looked up in (and on success written to) the key's cache; the
// cached tokens are still charged, as OpenAI's TPM counts them ("Do cached
// prompts contribute to TPM rate limits? Yes").
func (q *quotas) admitOpenAI(key string, r request, cache bool, now time.Time) admission {
	ks := q.state(scopeOpenAI, key, now)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.req.refill(now)
	ks.tok.refill(now)
	need := r.inputTokens + int64(r.n)*r.maxTokens
	a := admission{need: need, inputTokens: r.inputTokens, inCharged: r.inputTokens}
	if !ks.tok.unlimited() && float64(need) > ks.tok.depth {
		a.tooLarge, a.dim, a.limit = true, "tokens", int64(ks.tok.limit)
		if q.countRejected {
			ks.req.chargeRejected()
		}
		a.header = ks.openAIHeaders()
		return a
	}
	checks := []dimCheck{{&ks.req, 1, "requests", "RPM"}, {&ks.tok, float64(need), "tokens", "TPM"}}
	acct := q.account(scopeOpenAI, key, now)
	if acct != nil {
		acct.mu.Lock()
		defer acct.mu.Unlock()
		acct.req.refill(now)
		acct.tok.refill(now)
		checks = append(checks, dimCheck{&acct.req, 1, "requests", "RPM"}, dimCheck{&acct.tok, float64(need), "tokens", "TPM"})
	}
	if i, _ := worst(checks); i >= 0 {
		if q.countRejected {
			ks.req.chargeRejected()
		}
		i, w := worst(checks)
		b := checks[i].b
		a.dim, a.limit, a.wait = checks[i].name, int64(b.limit), w
		a.used = int64(math.Round(b.limit - b.level))
		a.need = int64(checks[i].need)
		a.header = ks.openAIHeaders()
		return a
	}
	a.ok = true
	a.reserved = need - r.inputTokens
	ks.req.charge(1)
	ks.tok.charge(float64(need))
	if acct != nil {
		acct.req.charge(1)
		acct.tok.charge(float64(need))
	}
	if cache && r.prompt != nil {
		plan := planOpenAI(&ks.cache, r.prompt, r.cacheTTL, now)
		a.cacheRead = plan.read
		plan.commit(&ks.cache, now)
	}
	a.header = ks.openAIHeaders()
	return a
}

// peekHeaders returns the rate-limit headers of key in scope without
// charging.
func (q *quotas) peekHeaders(scope, key string, now time.Time) http.Header {
	ks := q.state(scope, key, now)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, b := range []*bucket{&ks.req, &ks.in, &ks.out, &ks.tok} {
		b.refill(now)
	}
	if scope == scopeOpenAI || scope == scopeInputTokens {
		return ks.openAIHeaders()
	}
	return ks.anthropicHeaders(now)
}

// anthropicHeaders renders the 12 anthropic-ratelimit-* headers (§1.3):
// token remaining rounded to the nearest 1000 and clamped at 0, resets as
// RFC 3339 whole seconds at which the bucket is full again, tokens-* as the
// sums of input and output. Unlimited dimensions are left out.
// ks.mu must be held and the buckets refilled.
func (ks *keyState) anthropicHeaders(now time.Time) http.Header {
	h := http.Header{}
	reset := func(b *bucket) string {
		return now.Add(b.toFull().Round(time.Millisecond)).UTC().Format("2006-01-02T15:04:05Z")
	}
	tokensRemaining := func(level float64) int64 { return max(0, int64(math.Round(level/1000))*1000) }
	if !ks.req.unlimited() {
		h["Anthropic-Ratelimit-Requests-Limit"] = []string{strconv.FormatInt(int64(ks.req.limit), 10)}
		h["Anthropic-Ratelimit-Requests-Remaining"] = []string{strconv.FormatInt(max(0, int64(math.Floor(ks.req.level))), 10)}
		h["Anthropic-Ratelimit-Requests-Reset"] = []string{reset(&ks.req)}
	}
	var sumLimit int64
	var sumLevel float64
	var latest *bucket
	for _, d := range []struct {
		name string
		b    *bucket
	}{{"Input", &ks.in}, {"Output", &ks.out}} {
		if d.b.unlimited() {
			continue
		}
		p := "Anthropic-Ratelimit-" + d.name + "-Tokens-"
		h[p+"Limit"] = []string{strconv.FormatInt(int64(d.b.limit), 10)}
		h[p+"Remaining"] = []string{strconv.FormatInt(tokensRemaining(d.b.level), 10)}
		h[p+"Reset"] = []string{reset(d.b)}
		sumLimit += int64(d.b.limit)
		sumLevel += max(0, d.b.level)
		if latest == nil || d.b.toFull() > latest.toFull() {
			latest = d.b
		}
	}
	if latest != nil {
		h["Anthropic-Ratelimit-Tokens-Limit"] = []string{strconv.FormatInt(sumLimit, 10)}
		h["Anthropic-Ratelimit-Tokens-Remaining"] = []string{strconv.FormatInt(tokensRemaining(sumLevel), 10)}
		h["Anthropic-Ratelimit-Tokens-Reset"] = []string{reset(latest)}
	}
	return h
}

// openAIHeaders renders x-ratelimit-{limit,remaining,reset}-{requests,tokens}
// (§2.2) with resets as Go durations rounded to the millisecond.
// ks.mu must be held and the buckets refilled.
func (ks *keyState) openAIHeaders() http.Header {
	h := http.Header{}
	for _, d := range []struct {
		name string
		b    *bucket
	}{{"requests", &ks.req}, {"tokens", &ks.tok}} {
		if d.b.unlimited() {
			continue
		}
		h.Set("x-ratelimit-limit-"+d.name, strconv.FormatInt(int64(d.b.limit), 10))
		h.Set("x-ratelimit-remaining-"+d.name, strconv.FormatInt(max(0, int64(math.Floor(d.b.level))), 10))
		h.Set("x-ratelimit-reset-"+d.name, d.b.toFull().Round(time.Millisecond).String())
	}
	return h
}

// retryAfterSeconds is the retry-after header value for a wait: whole
// seconds, rounded up, at least 1.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10)
}

package dispatch_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The simulated provider's dimensions. Its accounting is its own: it shares
// nothing with internal/flow, whose buckets it checks.
const (
	simReq = iota
	simIn
	simOut
	simTok
	simDims
)

var simHeader = [simDims]string{"requests", "input-tokens", "output-tokens", "tokens"}

// simCall is one request inside the simulated provider.
type simCall struct {
	seq      int
	arrive   time.Time // our send + its delivery delay: when it is charged
	respond  time.Time // set on arrival
	arrived  bool
	in, out  float64 // the request's real input and output tokens
	maxOut   float64 // its max_tokens
	prefix   int     // its cacheable prefix (0 none)
	pTokens  float64 // and real tokens, part of in
	read     float64 // the prefix tokens read from the cache at its arrival
	written  float64 // and written to it
	latency  time.Duration
	embed    bool // an embeddings request (OpenAI)
	status   int
	header   http.Header
	resp     chan *http.Response // buffered(1)
	hangsUp  <-chan struct{}
	canceled bool
}

// simProvider is an Anthropic-like provider on the fake clock: one token
// bucket per limited dimension, depth limit/60 × burst seconds, refilled
// continuously at limit/60 per second, full at the start. A request is
// charged when it arrives (our send plus its delivery delay): one request,
// its real input tokens, its max_tokens as output (refunded down to the
// real output when it answers) and both as tokens. When a bucket lacks the
// room it answers 429 with retry-after. Every answer carries the
// anthropic-ratelimit-* headers as of the charge (remaining exact, never
// rounded up).
type simProvider struct {
	clk *clock.Fake
	// openai makes it an OpenAI-like provider: the same buckets (it
	// limits requests and tokens, input and max_tokens together), its
	// x-ratelimit-* headers (reset: the time until the bucket is full)
	// and its answers (chat completions, embeddings).
	openai bool

	mu      sync.Mutex
	limit   [simDims]float64 // per minute; 0 = not limited
	depth   [simDims]float64
	level   [simDims]float64
	last    time.Time
	pending []*simCall
	waiting int // calls inside RoundTrip, not answered yet

	// Accounting for utilisation: net charge (charges − refunds) as of the
	// last successful charge, and when that was.
	charged, refunded [simDims]float64
	netAtLast         [simDims]float64
	lastCharge        time.Time
	ok, rejected      int
	order             []int // the requests charged, in the order charged
	maxDelay          time.Duration
	rejects           []string
	// cache is the key's prompt cache (simCache).
	cache       simCache
	cachedReads float64
}

// simCacheTTL is how long the simulated provider keeps a prefix unused.
const simCacheTTL = 5 * time.Minute

// simCache is a key's prompt cache as Anthropic documents it, shared by
// simProvider and the omniscient client (times in seconds after t0): a
// request whose prefix is available at its arrival reads it (not charged
// to ITPM) and refreshes it; else it writes it (charged). A written entry
// "only becomes available after the first response begins" (the writer's
// answer), so a request arriving before then writes it again; its
// lifetime runs simCacheTTL from the start of the last request that wrote
// or read it.
type simCache map[int]simEntry

type simEntry struct{ avail, expiry float64 }

// reads reports whether a request for prefix arriving at at reads it.
func (c simCache) reads(prefix int, at float64) bool {
	e, ok := c[prefix]
	return prefix > 0 && ok && at >= e.avail && at < e.expiry
}

// charge records a request for prefix charged at at and answering at
// respond.
func (c simCache) charge(prefix int, at, respond float64) {
	if prefix == 0 {
		return
	}
	e, ok := c[prefix]
	exp := at + simCacheTTL.Seconds()
	switch {
	case !ok || at >= e.expiry:
		e = simEntry{avail: respond, expiry: exp}
	case at < e.avail: // another write while the first is not available yet
		e = simEntry{avail: min(e.avail, respond), expiry: max(e.expiry, exp)}
	default:
		e.expiry = max(e.expiry, exp)
	}
	c[prefix] = e
}

// since is t in seconds after t0.
func since(t time.Time) float64 { return t.Sub(t0).Seconds() }

func newSimProvider(clk *clock.Fake, limit [simDims]float64, burstSeconds float64) *simProvider {
	p := &simProvider{clk: clk, limit: limit, last: clk.Now()}
	for d, l := range limit {
		p.depth[d] = l / 60 * burstSeconds
		p.level[d] = p.depth[d]
	}
	return p
}

// refill brings the buckets to now; p.mu held.
func (p *simProvider) refill(now time.Time) {
	dt := now.Sub(p.last).Seconds()
	if dt <= 0 {
		return
	}
	for d, l := range p.limit {
		if l > 0 {
			p.level[d] = math.Min(p.depth[d], p.level[d]+l/60*dt)
		}
	}
	p.last = now
}

func simInt(r *http.Request, name string) int64 {
	n, _ := strconv.ParseInt(r.Header.Get(name), 10, 64)
	return n
}

// RoundTrip registers the call; the driver answers it at its virtual time.
func (p *simProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := p.clk.Now()
	c := &simCall{
		in: float64(simInt(r, "X-Sim-In")), out: float64(simInt(r, "X-Sim-Out")), maxOut: float64(simInt(r, "X-Sim-Max")),
		prefix: int(simInt(r, "X-Sim-Prefix")), pTokens: float64(simInt(r, "X-Sim-Prefix-Tokens")),
		latency: time.Duration(simInt(r, "X-Sim-Latency")), embed: r.URL.Path == "/v1/embeddings",
		resp:    make(chan *http.Response, 1),
		hangsUp: r.Context().Done(),
	}
	delay := time.Duration(simInt(r, "X-Sim-Delay"))
	p.mu.Lock()
	// Events at the same instant are taken in request order, whatever
	// order the goroutines got here in.
	c.seq = int(simInt(r, "X-Sim-Id"))
	c.arrive = now.Add(delay)
	p.maxDelay = max(p.maxDelay, delay)
	p.pending = append(p.pending, c)
	p.waiting++
	p.mu.Unlock()
	select {
	case resp := <-c.resp:
		resp.Request = r
		return resp, nil
	case <-c.hangsUp:
		p.mu.Lock()
		c.canceled = true
		p.mu.Unlock()
		return nil, r.Context().Err()
	}
}

// eventAt is when c next needs the driver.
func (c *simCall) eventAt() time.Time {
	if c.arrived {
		return c.respond
	}
	return c.arrive
}

// next returns the earliest pending event.
func (p *simProvider) next() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t time.Time
	for _, c := range p.pending {
		if at := c.eventAt(); t.IsZero() || at.Before(t) {
			t = at
		}
	}
	return t, !t.IsZero()
}

// fire runs every event due at now, in time then arrival order.
func (p *simProvider) fire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		var due *simCall
		for _, c := range p.pending {
			if at := c.eventAt(); !at.After(now) && (due == nil || at.Before(due.eventAt()) || (at.Equal(due.eventAt()) && c.seq < due.seq)) {
				due = c
			}
		}
		if due == nil {
			return
		}
		at := due.eventAt()
		p.refill(at)
		if !due.arrived {
			p.arrive(due, at)
			continue
		}
		p.pending = slices.DeleteFunc(p.pending, func(c *simCall) bool { return c == due })
		if due.canceled {
			continue
		}
		if due.status == http.StatusOK {
			back := due.maxOut - due.out
			p.level[simOut] = math.Min(p.depth[simOut], p.level[simOut]+back)
			p.level[simTok] = math.Min(p.depth[simTok], p.level[simTok]+back)
			p.refunded[simOut] += back
			p.refunded[simTok] += back
		}
		p.waiting--
		due.resp <- p.answer(due) //nolint:bodyclose // RoundTrip hands it to the dispatcher, which closes it
	}
}

// arrive charges c or rejects it; p.mu held, buckets at at.
func (p *simProvider) arrive(c *simCall, at time.Time) {
	c.arrived = true
	in := c.in
	if c.prefix != 0 {
		if p.cache == nil {
			p.cache = simCache{}
		}
		if p.cache.reads(c.prefix, since(at)) {
			c.read = c.pTokens
			in -= c.read // cache reads do not count toward ITPM
		} else {
			c.written = c.pTokens
		}
	}
	need := [simDims]float64{1, in, c.maxOut, in + c.maxOut}
	var wait float64
	for d, l := range p.limit {
		if l > 0 && p.level[d] < need[d] {
			wait = math.Max(wait, (need[d]-p.level[d])/(l/60))
		}
	}
	c.status = http.StatusOK
	c.respond = at.Add(c.latency)
	if wait > 0 {
		c.status = http.StatusTooManyRequests
		c.respond = at
		p.rejected++
		p.rejects = append(p.rejects, fmt.Sprintf("at %v: need %v level %v depth %v (sent %v)", at.Sub(t0), need, p.level, p.depth, c.arrive.Sub(t0)))
	} else {
		for d, l := range p.limit {
			if l > 0 {
				p.level[d] -= need[d]
			}
			p.charged[d] += need[d]
			p.netAtLast[d] = p.charged[d] - p.refunded[d]
		}
		if c.prefix != 0 {
			p.cache.charge(c.prefix, since(at), since(c.respond))
			p.cachedReads += c.read
		}
		p.lastCharge = at
		p.ok++
		p.order = append(p.order, c.seq)
	}
	c.header = http.Header{"Content-Type": {"application/json"}}
	for d, l := range p.limit {
		if l == 0 {
			continue
		}
		if p.openai {
			full := time.Duration((p.depth[d] - p.level[d]) / (l / 60) * float64(time.Second))
			c.header.Set("x-ratelimit-limit-"+simHeader[d], strconv.FormatFloat(l, 'f', 0, 64))
			c.header.Set("x-ratelimit-remaining-"+simHeader[d], strconv.FormatFloat(math.Floor(math.Max(p.level[d], 0)), 'f', 0, 64))
			c.header.Set("x-ratelimit-reset-"+simHeader[d], full.String())
			continue
		}
		pre := "anthropic-ratelimit-" + simHeader[d]
		c.header.Set(pre+"-limit", strconv.FormatFloat(l, 'f', 0, 64))
		c.header.Set(pre+"-remaining", strconv.FormatFloat(math.Floor(math.Max(p.level[d], 0)), 'f', 0, 64))
		full := at.Add(time.Duration((p.depth[d] - p.level[d]) / (l / 60) * float64(time.Second)))
		c.header.Set(pre+"-reset", full.UTC().Format(time.RFC3339))
	}
	if wait > 0 {
		c.header.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait))))
	}
}

func (p *simProvider) answer(c *simCall) *http.Response {
	body := fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}}`,
		c.seq, int64(c.in-c.read-c.written), int64(c.out), int64(c.read), int64(c.written))
	switch {
	case p.openai && c.status != http.StatusOK:
		body = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	case c.status != http.StatusOK:
		body = `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}`
	case p.openai && c.embed:
		body = fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"m","usage":{"prompt_tokens":%d,"total_tokens":%d}}`,
			int64(c.in), int64(c.in))
	case p.openai:
		body = fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			c.seq, int64(c.in), int64(c.out), int64(c.in+c.out))
	}
	return &http.Response{StatusCode: c.status, Status: http.StatusText(c.status), Header: c.header,
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), ProtoMajor: 1, ProtoMinor: 1}
}

// simRequest is one request of a workload, its randomness drawn up front
// so that the outcome does not depend on goroutine order.
type simRequest struct {
	at       time.Duration // arrival after the start
	class    llm.Priority
	ticket   bool // through Acquire + Ticket.Call instead of Do
	estimate int64
	in, out  int64
	maxOut   int64
	prefix   int // its cacheable prefix (0: none; else 1-3), part of estimate and in
	inputs   int // an embeddings request's inputs (0: a chat request), estimated whole
	delay    time.Duration
	latency  time.Duration
}

// simWorkload is one random case.
type simWorkload struct {
	seed         uint64
	limit        [simDims]float64
	burstSeconds float64
	margin       float64
	allowance    time.Duration
	binding      int
	pattern      string
	mixed        bool
	// burstRoom is the upstream's burst_room: 0 the default, negative
	// none (the utilisation figures: the omniscient client keeps no
	// room).
	burstRoom float64
	reqs      []simRequest
	// cached workloads send their requests after one of three cacheable
	// prefixes (simPrefixTokens), read from the provider's cache once
	// written.
	cached bool
	// openai workloads run on an OpenAI upstream, a third of their
	// requests embeddings (withEmbeddings).
	openai bool
}

// simPrefixTokens is prefix i's size, in real and estimated tokens.
func simPrefixTokens(i int) int64 { return 1100 + int64(i)*700 }

// withPrefixes returns w with every request after one of three cacheable
// prefixes: the estimate and the real input grow by the prefix.
func (w simWorkload) withPrefixes() simWorkload {
	w.cached = true
	rnd := rand.New(rand.NewPCG(w.seed, 0xcace))
	w.reqs = slices.Clone(w.reqs)
	var before, after float64
	for i := range w.reqs {
		r := &w.reqs[i]
		before += float64(r.estimate)
		r.prefix = 1 + rnd.IntN(3)
		r.estimate += simPrefixTokens(r.prefix)
		r.in += simPrefixTokens(r.prefix)
		after += float64(r.estimate)
	}
	// The input limits grow with the prompts (a request that writes its
	// prefix must still fit the provider's bucket): the cache's reads,
	// which the provider does not count, are what lets more through.
	for _, d := range []int{simIn, simTok} {
		w.limit[d] = math.Round(w.limit[d] * after / max(before, 1))
	}
	return w
}

// withEmbeddings returns w on an OpenAI upstream (requests and tokens
// limited: the input and output limits drawn for w fold into the tokens
// one) with a third of its requests embeddings: an array of 1 to 16
// inputs estimated whole (the estimate and the real input are the array's
// sum), no output.
func (w simWorkload) withEmbeddings() simWorkload {
	w.openai = true
	rnd := rand.New(rand.NewPCG(w.seed, 0xe3bd))
	w.reqs = slices.Clone(w.reqs)
	// A binding token limit stays binding: the requests a second it
	// allowed, in tokens (input and max_tokens); loose input and output
	// limits fold into a loose tokens limit (none when either was none).
	var mean [simDims]float64
	for _, r := range w.reqs {
		mean[simIn] += float64(r.estimate) / float64(len(w.reqs))
		mean[simOut] += float64(r.maxOut) / float64(len(w.reqs))
	}
	mean[simReq], mean[simTok] = 1, mean[simIn]+mean[simOut]
	if w.binding != simReq {
		w.limit[simTok] = math.Round(w.limit[w.binding] / mean[w.binding] * mean[simTok])
		w.binding = simTok
	} else if w.limit[simTok] == 0 && w.limit[simIn] > 0 && w.limit[simOut] > 0 {
		w.limit[simTok] = w.limit[simIn] + w.limit[simOut]
	}
	w.limit[simIn], w.limit[simOut] = 0, 0
	for i := range w.reqs {
		if r := &w.reqs[i]; rnd.IntN(3) == 0 {
			r.inputs = 1 + rnd.IntN(16)
			r.maxOut, r.out = 0, 0
		}
	}
	return w
}

// newSimWorkload draws a workload: a binding dimension whose limit the
// demand exceeds, other dimensions limited loosely or not at all, request
// sizes well within the depth, an arrival pattern (all at once, a few
// bursts, or a Poisson stream faster than the limit), one class or all
// four, a fifth of them through tickets.
func newSimWorkload(seed uint64, margin float64) simWorkload {
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	w := simWorkload{seed: seed, margin: margin, burstSeconds: []float64{1, 2, 5, 10}[rnd.IntN(4)],
		allowance: upcfg.JitterAllowanceDefault, binding: rnd.IntN(simDims)}
	// Requests a second the binding limit allows, at least 3 requests per
	// burst: a request bigger than the provider's depth could never be
	// admitted there (the engine lets it accumulate up to its capacity).
	perSec := max(1+rnd.Float64()*7, 3/w.burstSeconds)
	meanIn := float64(100 + rnd.IntN(3000))
	maxOut := int64(50 + rnd.IntN(1000))
	outShare := 0.2 + rnd.Float64()*0.8
	mean := [simDims]float64{1, meanIn, float64(maxOut), meanIn + float64(maxOut)}
	for d := range simDims {
		switch {
		case d == w.binding:
			w.limit[d] = math.Round(perSec * 60 * mean[d])
		case rnd.IntN(3) == 0:
			// not limited
		default:
			w.limit[d] = math.Round(perSec * 60 * mean[d] * (1.5 + rnd.Float64()*2))
		}
	}
	// Enough demand for 10 to 40 s of the binding limit after its burst.
	n := int(perSec * (w.burstSeconds + 10 + rnd.Float64()*30))
	w.mixed = rnd.IntN(2) == 0
	w.pattern = []string{"burst", "bursts", "poisson"}[rnd.IntN(3)]
	var at time.Duration
	for i := range n {
		r := simRequest{class: llm.Normal, ticket: rnd.IntN(5) == 0, maxOut: maxOut}
		if w.mixed {
			r.class = llm.Priority(rnd.IntN(llm.NumPriorities))
		}
		switch w.pattern {
		case "bursts":
			if i > 0 && rnd.IntN(int(perSec*3)+1) == 0 {
				at += time.Duration(rnd.Float64() * float64(2*time.Second))
			}
		case "poisson":
			if i > 0 {
				at += time.Duration(rnd.ExpFloat64() / (perSec * 4) * float64(time.Second))
			}
		}
		r.at = at
		r.estimate = max(1, int64(meanIn*(0.5+rnd.Float64())))
		// The real input is the estimate −5 % … +2 %: within the 2 %
		// safety margin (with no margin, never above the estimate).
		hi := 0.02
		if margin == 1 {
			hi = 0
		}
		r.in = max(1, int64(math.Floor(float64(r.estimate)*(1-0.05+rnd.Float64()*(0.05+hi)))))
		r.out = int64(math.Floor(float64(maxOut) * outShare * rnd.Float64()))
		r.delay = time.Duration(rnd.Float64() * float64(w.allowance))
		r.latency = time.Duration((0.1 + rnd.Float64()*2.9) * float64(time.Second))
		w.reqs = append(w.reqs, r)
	}
	return w
}

// simResult is what one workload did.
type simResult struct {
	rejected    int
	rejects     []string // what each 429 lacked
	utilisation float64  // of the binding dimension
	binding     int      // the dimension used the most
	elapsed     time.Duration
	order       []int // requests in the order the provider charged them
	cachedReads float64
}

// run drives a real Dispatcher through the workload on a fake clock,
// event by event: it moves time only once every request is accounted for
// (finished, queued in the scheduler, or inside the provider) and the
// dispatcher's state has stopped changing, and then only to the next
// timer, provider event or arrival.
func (w simWorkload) run(t *testing.T) simResult {
	t.Helper()
	fc := clock.NewFake(t0)
	p := newSimProvider(fc, w.limit, w.burstSeconds)
	p.openai = w.openai
	protocol := llm.Anthropic
	if w.openai {
		protocol = llm.OpenAI
	}
	d, err := dispatch.New(dispatch.Config{
		Config: upcfg.Config{
			Name: "sim", Protocol: protocol, BaseURL: "http://sim.invalid", APIKey: "k",
			Limits: upcfg.Limits{RequestsPerMinute: int64(w.limit[simReq]), InputTokensPerMinute: int64(w.limit[simIn]),
				OutputTokensPerMinute: int64(w.limit[simOut]), TokensPerMinute: int64(w.limit[simTok])},
			BurstSeconds: w.burstSeconds, SafetyMargin: w.margin, JitterAllowance: w.allowance,
			BurstRoom: w.burstRoom,
		},
		HTTPClient: &http.Client{Transport: p},
		Clock:      fc,
		Rand:       rand.New(rand.NewPCG(w.seed, 1)),
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	defer func() { require.NoError(t, d.Stop(context.Background())) }()

	var started, done atomic.Int32
	errs := make(chan error, len(w.reqs))
	launch := func(id int, r simRequest) {
		started.Add(1)
		go func() {
			defer done.Add(1)
			errs <- w.call(d, id, r)
		}()
	}
	type state struct {
		snap          dispatch.Snapshot
		timers        int
		waiting, done int32
	}
	observe := func() (state, bool) {
		p.mu.Lock()
		waiting := int32(p.waiting)
		p.mu.Unlock()
		s := state{snap: d.Snapshot(), timers: fc.Timers(), waiting: waiting, done: done.Load()}
		consistent := s.done+int32(queued(s.snap))+s.waiting == started.Load() && int32(s.snap.InFlight) == s.waiting
		return s, consistent && dispatch.LoopIdle(d)
	}
	// settle returns once the system is quiet: every request accounted
	// for (finished, queued, or waiting inside the provider, so every
	// admitted request has reached the provider at the instant it was
	// admitted), the admission loop idle with nothing left to act on, and
	// nothing changing over a few scheduling rounds.
	settle := func() {
		var prev state
		stable := 0
		limit := time.Now().Add(30 * time.Second)
		for {
			s, ok := observe()
			if ok && s == prev {
				if stable++; stable >= 2 {
					return
				}
			} else {
				stable = 0
			}
			prev = s
			for range 4 {
				runtime.Gosched()
			}
			if time.Now().After(limit) {
				t.Fatalf("seed %d: the dispatcher does not settle: %+v", w.seed, s)
			}
		}
	}
	far := t0.Add(100 * time.Hour)
	i := 0
	for {
		// One at a time, so requests arriving at the same instant queue
		// in a known order.
		for i < len(w.reqs) && !t0.Add(w.reqs[i].at).After(fc.Now()) {
			launch(i, w.reqs[i])
			i++
			settle()
		}
		settle()
		if int(done.Load()) == len(w.reqs) {
			break
		}
		next := far
		if i < len(w.reqs) {
			next = t0.Add(w.reqs[i].at)
		}
		if at, ok := p.next(); ok && at.Before(next) {
			next = at
		}
		if at, ok := fc.Next(); ok && at.Before(next) {
			next = at
		}
		require.True(t, next.Before(far), "seed %d: nothing left to wait for with %d of %d done", w.seed, done.Load(), len(w.reqs))
		if next.Sub(fc.Now()) > time.Hour {
			s, _ := observe()
			fn, _ := fc.Next()
			t.Fatalf("seed %d: jump at %v to %v (next timer %v, idle %v): %+v", w.seed, fc.Now().Sub(t0), next.Sub(t0), fn.Sub(t0), dispatch.LoopIdle(d), s)
		}
		fc.Set(next)
		p.fire(next)
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err, "seed %d", w.seed)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	res := simResult{rejected: p.rejected, elapsed: p.lastCharge.Sub(t0), rejects: p.rejects, order: p.order, cachedReads: p.cachedReads}
	// Utilisation of the binding dimension (the limited one used the
	// most): what the provider admitted (net of refunds) by its last
	// charge, over what its bucket could admit from t0 (full) to then:
	// depth + rate × elapsed.
	for b, l := range w.limit {
		if l > 0 {
			allowed := p.depth[b] + l/60*res.elapsed.Seconds()
			if u := p.netAtLast[b] / allowed; u > res.utilisation {
				res.utilisation, res.binding = u, b
			}
		}
	}
	require.Equal(t, len(w.reqs), p.ok, "seed %d: every request served once", w.seed)
	return res
}

// call sends one request, through Do or a ticket, and reads its answer.
func (w simWorkload) call(d *dispatch.Dispatcher, id int, r simRequest) error {
	body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, r.maxOut)
	if r.prefix > 0 {
		// The prefix's text is its tokens' worth of bytes (4 a token).
		text := strings.Repeat(strconv.Itoa(r.prefix), int(simPrefixTokens(r.prefix))*4)
		body = fmt.Sprintf(`{"model":"m","max_tokens":%d,"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"x"}]}`,
			r.maxOut, text)
	}
	path, endpoint := "/v1/messages", provider.EndpointChat
	switch {
	case w.openai && r.inputs > 0:
		// The inputs share the estimate; the array is priced whole.
		in := make([]string, r.inputs)
		for i := range in {
			in[i] = strconv.Quote(strings.Repeat("e", int(max(r.estimate/int64(r.inputs), 1))*4))
		}
		path, endpoint = "/v1/embeddings", provider.EndpointEmbeddings
		body = fmt.Sprintf(`{"model":"m","input":[%s]}`, strings.Join(in, ","))
	case w.openai:
		path = "/v1/chat/completions"
		body = fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, r.maxOut)
	}
	req := &dispatch.Request{
		Method:   http.MethodPost,
		Path:     path,
		Endpoint: endpoint,
		Body:     []byte(body),
		Cost:     provider.Cost{Model: "m", InputTokens: r.estimate, OutputTokens: r.maxOut},
		Priority: r.class,
		Deadline: t0.Add(50 * time.Hour),
		Header: http.Header{
			"X-Sim-In": {strconv.FormatInt(r.in, 10)}, "X-Sim-Out": {strconv.FormatInt(r.out, 10)},
			"X-Sim-Max": {strconv.FormatInt(r.maxOut, 10)}, "X-Sim-Delay": {strconv.FormatInt(int64(r.delay), 10)},
			"X-Sim-Latency": {strconv.FormatInt(int64(r.latency), 10)}, "X-Sim-Id": {strconv.Itoa(id)},
		},
	}
	if r.prefix > 0 {
		req.Header.Set("X-Sim-Prefix", strconv.Itoa(r.prefix))
		req.Header.Set("X-Sim-Prefix-Tokens", strconv.FormatInt(simPrefixTokens(r.prefix), 10))
	}
	ctx := context.Background()
	var resp *dispatch.Response
	var err error
	if r.ticket {
		// As a job worker does: a failed call goes back for a new ticket.
		for range 4 {
			tk, aerr := d.Acquire(ctx, dispatch.AcquireParams{Priority: r.class, Cost: req.Cost, Deadline: req.Deadline})
			if aerr != nil {
				return aerr
			}
			if resp, err = tk.Call(ctx, req); !errors.Is(err, dispatch.ErrCallFailed) {
				break
			}
		}
	} else {
		resp, err = d.Do(ctx, req)
	}
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// TestDispatcherNeverExceedsProviderQuota is the quota proof: the real
// Dispatcher (Do, and Acquire + Ticket.Call for a fifth of the requests)
// against simProvider, an independent simulation of the provider's token
// buckets, on the fake clock, for many random workloads (seeded: a failure
// names its seed, and newSimWorkload(seed, margin).run(t) replays it; the
// driver makes each run deterministic).
//
// Each request reaches the provider a random delivery delay after we send
// it (up to the configured jitter_allowance, 100 ms), is charged there and
// answers after a random 0.1–3 s with random usage (input within −5 %/+2 %
// of the estimate, output up to max_tokens). Limits, burst depth (1–10 s),
// arrival pattern (all at once, bursts, a stream faster than the limit),
// classes (one, or all four) and sizes are drawn per workload.
//
// Properties:
//
//   - Never exceeded: the provider answers no request with 429 (its
//     buckets always had room when our requests arrived), and every request
//     is served exactly once.
//   - Never exceeded with the room for bursts: a quarter of the
//     mixed-class workloads again with the learned room for urgent bursts (burst_room's
//     default); the utilisation figures are taken without it, as the
//     omniscient client keeps no room either (what the room costs is
//     measured by sluice bench trace). The omniscient client's drain over
//     ours on these runs is logged and bounded from below too
//     (simMinRoomRatio, simMinRoomMeanRatio): the room's cost, on drains
//     of 10 to 40 s where every class arrives at once.
//   - Utilisation of the binding dimension: for each limited dimension, the
//     provider's net charge (charges at arrival minus output refunds at
//     completion) by its last charge T, divided by what its bucket could
//     have admitted from t0 (when it was full) to T: depth + rate × (T−t0);
//     the binding dimension is the one with the highest figure. 1 is the
//     best any client could do. It is asserted over the saturated
//     workloads only (everything queued at t0), where demand never limits
//     it.
//
// 1,000 workloads at the default margin and 500 with no margin (an eighth
// of each under -race or -short) run in about 30 s on the 2-core
// development machine.
//
// A second utilisation figure compares with an omniscient client
// (simWorkload.idealLastCharge): the same requests in the order the
// provider charged ours, each timed for the first instant the provider
// has room, knowing every usage, delay and latency. Its drain over ours
// is 1 at best, over every workload. It shows that the first figure's old
// floor (0.31) was mostly the provider's own max_tokens holds, which no
// client can spend.
//
// Measured on 2026-12-01 (0 provider 429s throughout):
//
//	                          first figure (min / mean)   omniscient / ours (min / mean)
//	round 3, before           0.342 / 0.872               0.364 / 0.875   (margin 0.98)
//	after                     0.756 / 0.960               0.781 / 0.959   (margin 0.98)
//	                          0.785 / 0.974               0.789 / 0.975   (no margin)
//
// What lifted it: a credit never fills a bucket over what was reserved
// within the jitter allowance (flow.Limiter.RefundPending: the provider,
// full while those were on their way, dropped what it gave back, and
// without the cap our bucket ran ahead of it, seed 11); with that, Observe
// credits the output answered requests gave back after a report; and the
// clamp no longer takes off the requests reserved within an allowance
// after the reported one (our buckets hold them already). The rest of the
// gap to 98 %: the 2 % margin (0.959 against 0.975 with none), the 100 ms
// of delivery uncertainty (TestQuotaAllowanceFigures: 0.983-0.987 at 10 ms
// with the narrow margins), the urgent classes' headroom (the lowest
// seeds are mixed-class), and the raise's caution (every attempt not
// answered when the reported one was sent is counted as not charged).
func TestDispatcherNeverExceedsProviderQuota(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		margin     float64
		workloads  int
		floor      float64
		idealFloor float64
	}{
		{upcfg.SafetyMarginDefault, 1000, simMinUtilisation, simMinIdealRatio},
		{1, 500, simMinUtilisationNoMargin, simMinIdealRatio},
	} {
		workloads := tc.workloads
		if raceEnabled || testing.Short() {
			workloads /= 8
		}
		var sum, low float64 = 0, 2
		var lowSeed uint64
		saturated := 0
		var idealSum, idealLow float64 = 0, 2
		var idealLowSeed uint64
		start := time.Now()
		var roomSum, roomLow float64 = 0, 2
		var roomLowSeed uint64
		roomRuns := 0
		for seed := range uint64(workloads) {
			w := newSimWorkload(seed, tc.margin)
			if w.mixed && seed%4 == 0 {
				roomed := w.run(t)
				require.Zero(t, roomed.rejected, "seed %d (margin %v, room for bursts): the provider answered 429: %v\nworkload: limits %v burst %v %s, %d requests",
					seed, tc.margin, roomed.rejects, w.limit, w.burstSeconds, w.pattern, len(w.reqs))
				r := w.idealLastCharge(roomed.order).Seconds() / roomed.elapsed.Seconds()
				roomSum, roomRuns = roomSum+r, roomRuns+1
				if r < roomLow {
					roomLow, roomLowSeed = r, seed
				}
			}
			w.burstRoom = -1
			res := w.run(t)
			require.Zero(t, res.rejected, "seed %d (margin %v): the provider answered 429: %v\nworkload: limits %v burst %v %s mixed %v, %d requests",
				seed, tc.margin, res.rejects, w.limit, w.burstSeconds, w.pattern, w.mixed, len(w.reqs))
			// Against an omniscient client in the same order, on the
			// same provider: every workload, demand-limited or not.
			ratio := w.idealLastCharge(res.order).Seconds() / res.elapsed.Seconds()
			idealSum += ratio
			if ratio < idealLow {
				idealLow, idealLowSeed = ratio, seed
			}
			if w.pattern != "burst" {
				continue // demand may be what limits it
			}
			saturated++
			sum += res.utilisation
			if res.utilisation < low {
				low, lowSeed = res.utilisation, seed
			}
		}
		t.Logf("margin %v: %d mixed-class workloads with the room for bursts, 0 provider 429s; omniscient client's drain over ours: min %.4f (seed %d), mean %.4f",
			tc.margin, roomRuns, roomLow, roomLowSeed, roomSum/float64(max(roomRuns, 1)))
		t.Logf("margin %v: %d workloads, 0 provider 429s; utilisation of the binding dimension over the %d saturated ones: min %.4f (seed %d), mean %.4f; omniscient client's drain over ours, every workload: min %.4f (seed %d), mean %.4f; %v",
			tc.margin, workloads, saturated, low, lowSeed, sum/float64(saturated), idealLow, idealLowSeed, idealSum/float64(workloads), time.Since(start).Round(time.Millisecond))
		require.GreaterOrEqual(t, low, tc.floor, "margin %v: seed %d", tc.margin, lowSeed)
		require.GreaterOrEqual(t, idealLow, tc.idealFloor, "margin %v: seed %d", tc.margin, idealLowSeed)
		require.GreaterOrEqual(t, idealSum/float64(workloads), simMinMeanRatio, "margin %v: mean against the omniscient client", tc.margin)
		require.GreaterOrEqual(t, sum/float64(saturated), simMinMeanRatio, "margin %v: mean utilisation of the binding dimension", tc.margin)
		require.GreaterOrEqual(t, roomLow, simMinRoomRatio, "margin %v, room for bursts: seed %d", tc.margin, roomLowSeed)
		require.GreaterOrEqual(t, roomSum/float64(max(roomRuns, 1)), simMinRoomMeanRatio, "margin %v: mean against the omniscient client with the room for bursts", tc.margin)
	}
}

// TestDispatcherNeverExceedsProviderQuotaWithPromptCache is the quota
// proof with cached prefixes: the same random workloads (a fifth of their
// requests through tickets, whose request is known only at the call),
// every request after one of three cacheable prefixes of 1,100 to 2,500
// tokens, against simProvider keeping a prompt cache as Anthropic
// documents it (simCache: a prefix available at a request's arrival is
// read, and cache reads are not charged to ITPM; else it is written, and
// charged; a write is available once its answer begins). Admission
// charges a request what the provider will count (the prefix its key
// holds is not input), corrected by the usage. Properties, as for
// TestDispatcherNeverExceedsProviderQuota: the provider answers no request
// with 429 and serves each once; the utilisation of the binding dimension
// (what the provider charged) over the saturated workloads, and the drain
// of an omniscient client that knows the cache (idealLastCharge) over
// ours over every workload, meet the floors simCache*.
func TestDispatcherNeverExceedsProviderQuotaWithPromptCache(t *testing.T) {
	t.Parallel()
	// A fifth of them under -race or -short: seeds 0 to 11, of which 10
	// and 11 are saturated.
	workloads := 60
	if raceEnabled || testing.Short() {
		workloads /= 5
	}
	var sum, low float64 = 0, 2
	var lowSeed uint64
	saturated := 0
	var reads, input float64
	var idealSum, idealLow float64 = 0, 2
	var idealLowSeed uint64
	for seed := range uint64(workloads) {
		w := newSimWorkload(seed, upcfg.SafetyMarginDefault).withPrefixes()
		w.burstRoom = -1
		res := w.run(t)
		require.Zero(t, res.rejected, "seed %d (cached prefixes): the provider answered 429: %v\nworkload: limits %v burst %v %s mixed %v, %d requests",
			seed, res.rejects, w.limit, w.burstSeconds, w.pattern, w.mixed, len(w.reqs))
		reads += res.cachedReads
		for _, r := range w.reqs {
			input += float64(r.in)
		}
		ratio := w.idealLastCharge(res.order).Seconds() / res.elapsed.Seconds()
		idealSum += ratio
		if ratio < idealLow {
			idealLow, idealLowSeed = ratio, seed
		}
		if w.pattern != "burst" {
			continue
		}
		saturated++
		sum += res.utilisation
		if res.utilisation < low {
			low, lowSeed = res.utilisation, seed
		}
	}
	t.Logf("%d workloads with cached prefixes, 0 provider 429s; %.1f%% of the input read from the cache; utilisation of the binding dimension over the %d saturated ones: min %.4f (seed %d), mean %.4f; omniscient client's drain over ours, every workload: min %.4f (seed %d), mean %.4f",
		workloads, 100*reads/input, saturated, low, lowSeed, sum/float64(max(saturated, 1)), idealLow, idealLowSeed, idealSum/float64(workloads))
	require.Positive(t, reads, "the cache was read")
	require.Positive(t, saturated, "saturated workloads are measured")
	require.GreaterOrEqual(t, low, simCacheMinUtilisation, "seed %d", lowSeed)
	require.GreaterOrEqual(t, idealLow, simCacheMinIdealRatio, "seed %d", idealLowSeed)
	require.GreaterOrEqual(t, idealSum/float64(workloads), simCacheMinMean, "mean against the omniscient client")
	require.GreaterOrEqual(t, sum/float64(saturated), simCacheMinMean, "mean utilisation of the binding dimension")
}

// The floors of the prompt-cache workloads, a little under the minima and
// means measured over the full and the -short sets (docs/engine.md,
// "Prompt caching in the quota proof").
const (
	simCacheMinUtilisation = 0.85
	simCacheMinIdealRatio  = 0.85
	simCacheMinMean        = 0.92
)

// TestDispatcherNeverExceedsProviderQuotaWithEmbeddings is the quota
// proof on an OpenAI upstream whose workload mixes chat completions with
// embeddings (withEmbeddings: a third of the requests, each an array of 1
// to 16 inputs estimated whole, no output), through Do and tickets alike,
// against simProvider as an OpenAI-like provider (requests and tokens
// limited, x-ratelimit-* headers): no request is answered 429, every one
// is served once, and the utilisation of the binding dimension and the
// omniscient client's drain over ours meet the floors of
// TestDispatcherNeverExceedsProviderQuota.
func TestDispatcherNeverExceedsProviderQuotaWithEmbeddings(t *testing.T) {
	t.Parallel()
	workloads := 200
	if raceEnabled || testing.Short() {
		workloads /= 8
	}
	var sum, low float64 = 0, 2
	var lowSeed uint64
	saturated, embeddings := 0, 0
	var idealSum, idealLow float64 = 0, 2
	var idealLowSeed uint64
	for seed := range uint64(workloads) {
		w := newSimWorkload(seed, upcfg.SafetyMarginDefault).withEmbeddings()
		w.burstRoom = -1
		res := w.run(t)
		require.Zero(t, res.rejected, "seed %d (embeddings): the provider answered 429: %v\nworkload: limits %v burst %v %s mixed %v, %d requests",
			seed, res.rejects, w.limit, w.burstSeconds, w.pattern, w.mixed, len(w.reqs))
		for _, r := range w.reqs {
			if r.inputs > 0 {
				embeddings++
			}
		}
		ratio := w.idealLastCharge(res.order).Seconds() / res.elapsed.Seconds()
		idealSum += ratio
		if ratio < idealLow {
			idealLow, idealLowSeed = ratio, seed
		}
		if w.pattern != "burst" {
			continue
		}
		saturated++
		sum += res.utilisation
		if res.utilisation < low {
			low, lowSeed = res.utilisation, seed
		}
	}
	t.Logf("%d workloads with embeddings (%d embeddings requests), 0 provider 429s; utilisation of the binding dimension over the %d saturated ones: min %.4f (seed %d), mean %.4f; omniscient client's drain over ours, every workload: min %.4f (seed %d), mean %.4f",
		workloads, embeddings, saturated, low, lowSeed, sum/float64(max(saturated, 1)), idealLow, idealLowSeed, idealSum/float64(workloads))
	require.Positive(t, embeddings)
	require.GreaterOrEqual(t, low, simMinUtilisation, "seed %d", lowSeed)
	require.GreaterOrEqual(t, idealLow, simMinIdealRatio, "seed %d", idealLowSeed)
	require.GreaterOrEqual(t, idealSum/float64(workloads), simMinMeanRatio, "mean against the omniscient client")
	require.GreaterOrEqual(t, sum/float64(max(saturated, 1)), simMinMeanRatio, "mean utilisation of the binding dimension")
}

// The utilisation floors the engine meets today (see the test's comment),
// a little under the measured minima: first figure 0.756 and 0.785,
// omniscient client over ours 0.781 and 0.789.
const (
	simMinUtilisation         = 0.75
	simMinUtilisationNoMargin = 0.75
	simMinIdealRatio          = 0.75
	// simMinMeanRatio bounds both means from below (measured 0.957-0.975
	// over the full and the -short sets of workloads; 0.875 before the
	// credit cap).
	simMinMeanRatio = 0.95
	// simMinRoomRatio and simMinRoomMeanRatio bound the omniscient
	// client's drain over ours on the mixed-class workloads run with the
	// room for bursts, which leaves part of every bucket unused on
	// purpose (measured: min 0.562-0.571, mean 0.869-0.891 over the full
	// and the -short sets).
	simMinRoomRatio     = 0.53
	simMinRoomMeanRatio = 0.85
)

// idealLastCharge is when an omniscient client would have had the
// provider charge the last of w's requests, taking them in order (the
// order our requests were charged in): it knows every request's real
// usage, delivery delay and latency and the provider's exact buckets, so
// it times each arrival for the first instant the provider has room,
// never before the request exists and its delivery delay has passed.
// Same provider as simProvider: buckets full at t0, charge at arrival
// (max_tokens as output), refund of the unused output at the answer.
func (w simWorkload) idealLastCharge(order []int) time.Duration {
	var depth, level, rate [simDims]float64
	for d, l := range w.limit {
		depth[d] = l / 60 * w.burstSeconds
		level[d] = depth[d]
		rate[d] = l / 60
	}
	type refund struct {
		at   float64 // seconds after t0
		back float64
	}
	var refunds []refund // sorted by at
	cur := 0.0
	// The provider's prompt cache (cached workloads), on simProvider's
	// rule: each request is charged at the earlier of the first instant
	// the provider has room for it as a write and the first it has room
	// for it as a read (once its prefix is available).
	cache := simCache{}
	advance := func(to float64) {
		for _, r := range refunds {
			if r.at > to {
				break
			}
			for d := range simDims {
				if rate[d] > 0 {
					level[d] = math.Min(depth[d], level[d]+rate[d]*(r.at-cur))
				}
			}
			cur = r.at
			level[simOut] = math.Min(depth[simOut], level[simOut]+r.back)
			level[simTok] = math.Min(depth[simTok], level[simTok]+r.back)
			refunds = refunds[1:]
		}
		for d := range simDims {
			if rate[d] > 0 {
				level[d] = math.Min(depth[d], level[d]+rate[d]*(to-cur))
			}
		}
		cur = to
	}
	for _, i := range order {
		r := w.reqs[i]
		var need [simDims]float64
		advance(math.Max(cur, (r.at + r.delay).Seconds()))
		for {
			in := float64(r.in)
			if cache.reads(r.prefix, cur) {
				in -= float64(simPrefixTokens(r.prefix))
			}
			need = [simDims]float64{1, in, float64(r.maxOut), in + float64(r.maxOut)}
			var wait float64
			for d := range simDims {
				if rate[d] > 0 && level[d] < need[d] {
					wait = math.Max(wait, (need[d]-level[d])/rate[d])
				}
			}
			if wait == 0 {
				break
			}
			to := cur + wait + 1e-9
			if len(refunds) > 0 && refunds[0].at < to {
				to = refunds[0].at
			}
			if e, ok := cache[r.prefix]; ok && e.avail > cur && e.avail < to && !cache.reads(r.prefix, cur) {
				to = e.avail // it becomes a read, and needs less
			}
			advance(to)
		}
		for d := range simDims {
			if rate[d] > 0 {
				level[d] -= need[d]
			}
		}
		at := cur + r.latency.Seconds()
		cache.charge(r.prefix, cur, at)
		k, _ := slices.BinarySearchFunc(refunds, at, func(x refund, t float64) int {
			return cmp.Compare(x.at, t)
		})
		refunds = slices.Insert(refunds, k, refund{at: at, back: float64(r.maxOut - r.out)})
	}
	return time.Duration(cur * float64(time.Second))
}

package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The prompt-cache workloads on the mock (which keeps its own per-key
// caches and counts ITPM as the provider does): conversations that share
// a 3,000-token system prompt marked with cache_control, each turn marking
// its last user message too, so a conversation reads its own history from
// the cache on the key that holds it.

const (
	cacheModel        = "claude-sonnet-4-5"
	cacheSystemTokens = 3000
)

// cacheSystem is the shared system prompt: cacheSystemTokens tokens in the
// mock's count (4 bytes a token).
var cacheSystem = strings.Repeat("You are a careful assistant. ", cacheSystemTokens*4/29+1)[:cacheSystemTokens*4]

// cacheBody is turn (0-based) of session s: the system prompt, the turns
// before it (a user question and an answer of userTokens and
// answerTokens each) and its own question, marked for caching.
func cacheBody(s, turn, userTokens, answerTokens int, maxTokens int) []byte {
	var msgs []string
	text := func(tag string, i, tokens int) string {
		head := fmt.Sprintf("%s %d of session %d: ", tag, i, s)
		return head + strings.Repeat("x", max(tokens*4-len(head), 1))
	}
	for i := range turn {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q}]}`, text("question", i, userTokens)),
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":%q}]}`, text("answer", i, answerTokens)))
	}
	msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}]}`, text("question", turn, userTokens)))
	return []byte(fmt.Sprintf(`{"model":%q,"max_tokens":%d,"metadata":{"user_id":"session-%d"},"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],"messages":[%s]}`,
		cacheModel, maxTokens, s, cacheSystem, strings.Join(msgs, ",")))
}

// cacheRequest is a dispatch request for body, priced by the estimator.
func cacheRequest(t testing.TB, body []byte) *dispatch.Request {
	t.Helper()
	cost, err := provider.Estimate(upcfg.Anthropic, body)
	require.NoError(t, err)
	return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Header: http.Header{}, Body: body, Cost: cost,
		Deadline: t0.Add(time.Hour)}
}

// cacheRun is what one workload did on the mock.
type cacheRun struct {
	requests   int
	elapsed    time.Duration // first to last admission, fake time
	provider   int64         // provider 429s
	read       int64         // prefix tokens read from the cache
	written    int64         // prefix tokens written to it
	keyRequest map[string]int64
}

// readShare is the share of the cacheable prefix tokens read from the
// cache.
func (r cacheRun) readShare() float64 {
	return float64(r.read) / float64(max(r.read+r.written, 1))
}

// perSecond is the requests a (fake) second the run reached.
func (r cacheRun) perSecond() float64 { return float64(r.requests) / max(r.elapsed.Seconds(), 1e-9) }

func newCacheRun(p *poolRig, n int) cacheRun {
	st := p.mock.Stats()
	r := cacheRun{requests: n, provider: status429(st), read: st.Overall.Cache.ReadTokens, written: st.Overall.Cache.WriteTokens,
		keyRequest: map[string]int64{}}
	if st.Overall.FirstAdmission != nil {
		r.elapsed = st.Overall.LastAdmission.Sub(*st.Overall.FirstAdmission)
	}
	for k, s := range st.Keys {
		r.keyRequest[k] = s.ByStatus["200"]
	}
	return r
}

// runSessions runs sessions conversations of turns turns each, every
// session's turns one after the other (the next question once the answer
// has been read), all sessions at once, driving the fake clock event by
// event.
func runSessions(t testing.TB, p *poolRig, sessions, turns int) cacheRun {
	t.Helper()
	return runSessionsOn(t, p, []*dispatch.Dispatcher{p.d}, sessions, turns)
}

// runSessionsOn is runSessions with the turns dealt to ds in turn: one
// dispatcher is a pool choosing its own key; two one-key dispatchers on
// the keys of one mock are a round robin over them.
func runSessionsOn(t testing.TB, p *poolRig, ds []*dispatch.Dispatcher, sessions, turns int) cacheRun {
	t.Helper()
	var dealt atomic.Int64
	var done atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			for turn := range turns {
				d := ds[int(dealt.Add(1)-1)%len(ds)]
				resp, err := d.Do(context.Background(), cacheRequest(t, cacheBody(s, turn, 200, 400, 200)))
				if err != nil {
					errs <- fmt.Errorf("session %d turn %d: %w", s, turn, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("session %d turn %d: status %d", s, turn, resp.StatusCode)
					return
				}
			}
		}()
	}
	p.driveUntil(t, sessions, &done, ds...)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return newCacheRun(p, sessions*turns)
}

// runShared sends n independent questions after the shared system prompt
// at once (a shared-prefix chat workload) and drains them.
func runShared(t testing.TB, p *poolRig, n int) cacheRun {
	t.Helper()
	var done atomic.Int32
	chans := make([]<-chan result, n)
	for i := range chans {
		ch := make(chan result, 1)
		inner := doAsync(context.Background(), p.d, cacheRequest(t, cacheBody(i, 0, 50, 0, 100)))
		go func() { res := <-inner; done.Add(1); ch <- res }()
		chans[i] = ch
	}
	p.driveUntil(t, n, &done)
	for _, r := range collect(chans) {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.resp.StatusCode)
	}
	return newCacheRun(p, n)
}

// driveUntil moves the fake clock event by event until n callers are
// done (each either done, or queued in the dispatcher while it rests).
func (p *poolRig) driveUntil(t testing.TB, n int, done *atomic.Int32, ds ...*dispatch.Dispatcher) {
	t.Helper()
	p.driveResting(t, n, done, func() int { return 0 }, ds...)
}

// driveResting is driveUntil with callers that may rest on the fake
// clock between their calls: resting counts those whose wake-up is still
// ahead of the clock.
func (p *poolRig) driveResting(t testing.TB, n int, done *atomic.Int32, resting func() int, ds ...*dispatch.Dispatcher) {
	t.Helper()
	if len(ds) == 0 {
		ds = []*dispatch.Dispatcher{p.d}
	}
	limit := time.Now().Add(120 * time.Second)
	for int(done.Load()) < n {
		waitQuiet(t, 20*time.Second, func() bool {
			q, inflight, idle := 0, 0, true
			for _, d := range ds {
				s := d.Snapshot()
				q, inflight, idle = q+queued(s), inflight+s.InFlight, idle && dispatch.LoopIdle(d)
			}
			return int(done.Load())+resting()+q == n && inflight == 0 && idle || int(done.Load()) == n
		})
		if int(done.Load()) >= n {
			return
		}
		next, ok := p.fc.Next()
		require.True(t, ok, "nothing to wait for with %d of %d done", done.Load(), n)
		p.fc.Set(next)
		require.True(t, time.Now().Before(limit), "the workload does not end: %d of %d done", done.Load(), n)
	}
}

// sustainedShared is the shared-prefix workload's sustained size: enough
// requests that the keys' burst (5 s of their limits) is a few per cent
// of the drain, whole prompts charged or not.
const sustainedShared = 1200

// cacheLimits are the provider's limits of the cache workloads, per key.
var cacheLimits = mock.Limits{RPM: 600, ITPM: 60_000, OTPM: 60_000}

func cacheRig(t testing.TB, admission, affinity string) *poolRig {
	return newPoolRig(t, mock.Config{Limits: cacheLimits, BurstSeconds: 5, OutputTokens: mock.OutputRange{Min: 10, Max: 100}},
		upcfg.Config{APIKeys: keys(2), Limits: upcfg.Limits{RequestsPerMinute: cacheLimits.RPM, InputTokensPerMinute: cacheLimits.ITPM,
			OutputTokensPerMinute: cacheLimits.OTPM}, JitterAllowance: upcfg.JitterAllowanceDefault,
			PromptCache: upcfg.PromptCache{Admission: admission, Affinity: affinity}})
}

// roundRobin runs the session workload dealt in turn to two one-key
// dispatchers on the two keys of one mock: round robin over the pool.
func roundRobin(t testing.TB, sessions, turns int) cacheRun {
	t.Helper()
	p := cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOn)
	return runSessionsOn(t, p, oneKeyDispatchers(t, p), sessions, turns)
}

// oneKeyDispatchers are two one-key dispatchers on the two keys of p's
// mock: a round robin over the pool when requests are dealt to them in
// turn.
func oneKeyDispatchers(t testing.TB, p *poolRig) []*dispatch.Dispatcher {
	t.Helper()
	var ds []*dispatch.Dispatcher
	for _, k := range keys(2) {
		d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "rr", Protocol: upcfg.Anthropic, BaseURL: "http://mock.invalid", APIKey: k.Key,
			Limits: upcfg.Limits{RequestsPerMinute: cacheLimits.RPM, InputTokensPerMinute: cacheLimits.ITPM, OutputTokensPerMinute: cacheLimits.OTPM}},
			Clock: p.fc, HTTPClient: &http.Client{Transport: inProcess(p.mock.Handler())}})
		require.NoError(t, err)
		require.NoError(t, d.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
		ds = append(ds, d)
	}
	return ds
}

// TestPromptCacheAffinity: 12 conversations of 6 turns sharing a
// 3,000-token system prompt over a 2-key pool read at least 85 % of their
// cacheable prefix tokens from the cache when each stays on the key that
// holds its cache, with no provider 429; round robin over the same two
// keys is measured beside it, and the key with the most room (affinity
// off).
func TestPromptCacheAffinity(t *testing.T) {
	t.Parallel()
	const sessions, turns = 12, 6
	on := runSessions(t, cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOn), sessions, turns)
	off := runSessions(t, cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOff), sessions, turns)
	rr := roundRobin(t, sessions, turns)
	t.Logf("affinity: %.1f%% of the cacheable prefix read from the cache (%d read, %d written), %.2f req/s, keys %v; most room: %.1f%% (%d read, %d written), %.2f req/s, keys %v; round robin: %.1f%% (%d read, %d written), %.2f req/s",
		100*on.readShare(), on.read, on.written, on.perSecond(), on.keyRequest, 100*off.readShare(), off.read, off.written, off.perSecond(), off.keyRequest,
		100*rr.readShare(), rr.read, rr.written, rr.perSecond())
	require.Zero(t, on.provider, "no provider 429")
	require.Zero(t, off.provider, "no provider 429")
	require.Zero(t, rr.provider, "no provider 429")
	require.GreaterOrEqual(t, on.readShare(), 0.85)
	require.Greater(t, on.readShare(), rr.readShare(), "affinity reads more from the cache than round robin")
	require.GreaterOrEqual(t, on.readShare(), off.readShare())
	for k, n := range on.keyRequest {
		require.Positive(t, n, "key %s serves sessions too", k)
	}
}

// TestPromptCacheAdmission: a shared-prefix chat workload on the same
// provider limits drains faster when admission charges what the provider
// counts (cache reads are not ITPM) than when it charges whole prompts,
// with no provider 429 either way.
func TestPromptCacheAdmission(t *testing.T) {
	t.Parallel()
	const n = 120
	aware := runShared(t, cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOn), n)
	whole := runShared(t, cacheRig(t, upcfg.PromptCacheOff, upcfg.PromptCacheOn), n)
	t.Logf("cache-aware: %.2f req/s (%v, read %d); whole prompts: %.2f req/s (%v, read %d)",
		aware.perSecond(), aware.elapsed, aware.read, whole.perSecond(), whole.elapsed, whole.read)
	require.Zero(t, aware.provider, "no provider 429")
	require.Zero(t, whole.provider, "no provider 429")
	require.Greater(t, aware.perSecond(), 2*whole.perSecond(), "cache reads leave the ITPM to other requests")
}

// BenchmarkPromptCache reports, in one run on the mock (fake time), the
// requests a second a shared-prefix chat workload reaches with cache-aware
// admission and with whole prompts charged (120 requests, mostly the
// keys' burst, and 1,200 sustained, where the burst is a few per cent of
// the drain), and the cached share of the
// prefix tokens of a conversation workload with and without affinity
// (BENCHMARKS.md, "Prompt caching"), and the same conversation workload
// sent as jobs through the ticket door (TestPromptCacheAffinityJobs):
//
//	go test ./internal/dispatch/ -run '^$' -bench BenchmarkPromptCache -benchtime 1x
func BenchmarkPromptCache(b *testing.B) {
	for range b.N {
		aware := runShared(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOn), 120)
		whole := runShared(b, cacheRig(b, upcfg.PromptCacheOff, upcfg.PromptCacheOn), 120)
		sustainedAware := runShared(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOn), sustainedShared)
		sustainedWhole := runShared(b, cacheRig(b, upcfg.PromptCacheOff, upcfg.PromptCacheOn), sustainedShared)
		if sustainedAware.provider+sustainedWhole.provider != 0 {
			b.Fatalf("provider 429s, sustained: %d %d", sustainedAware.provider, sustainedWhole.provider)
		}
		b.ReportMetric(sustainedAware.perSecond(), "sustained_aware_req/s")
		b.ReportMetric(sustainedWhole.perSecond(), "sustained_whole_req/s")
		on := runSessions(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOn), 12, 6)
		off := runSessions(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOff), 12, 6)
		rr := roundRobin(b, 12, 6)
		jobsOn, _ := runJobSessionsOn(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOn), nil, 12, 6)
		jobsOff, _ := runJobSessionsOn(b, cacheRig(b, upcfg.PromptCacheOn, upcfg.PromptCacheOff), nil, 12, 6)
		jobsRR := jobRoundRobin(b, 12, 6)
		if aware.provider+whole.provider+on.provider+off.provider+rr.provider+jobsOn.provider+jobsOff.provider+jobsRR.provider != 0 {
			b.Fatalf("provider 429s: %d %d %d %d %d %d %d %d", aware.provider, whole.provider, on.provider, off.provider, rr.provider,
				jobsOn.provider, jobsOff.provider, jobsRR.provider)
		}
		b.ReportMetric(100*jobsOn.readShare(), "jobs_affinity_cached_%")
		b.ReportMetric(100*jobsOff.readShare(), "jobs_ticket_key_cached_%")
		b.ReportMetric(100*jobsRR.readShare(), "jobs_round_robin_cached_%")
		b.ReportMetric(jobsOn.perSecond(), "jobs_affinity_req/s")
		b.ReportMetric(jobsOff.perSecond(), "jobs_ticket_key_req/s")
		b.ReportMetric(jobsRR.perSecond(), "jobs_round_robin_req/s")
		b.ReportMetric(100*rr.readShare(), "round_robin_cached_%")
		b.ReportMetric(rr.perSecond(), "round_robin_req/s")
		b.ReportMetric(aware.perSecond(), "aware_req/s")
		b.ReportMetric(whole.perSecond(), "whole_req/s")
		b.ReportMetric(100*on.readShare(), "affinity_cached_%")
		b.ReportMetric(100*off.readShare(), "most_room_cached_%")
		b.ReportMetric(on.perSecond(), "affinity_req/s")
		b.ReportMetric(off.perSecond(), "most_room_req/s")
	}
}

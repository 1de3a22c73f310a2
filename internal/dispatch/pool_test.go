package dispatch_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// inProcess is a transport that serves every request with h in the
// caller's goroutine: the mock on the test's fake clock, no network.
func inProcess(h http.Handler) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	})
}

// poolRig is a dispatcher over the real mock, both on one fake clock.
type poolRig struct {
	d    *dispatch.Dispatcher
	fc   *clock.Fake
	mock *mock.Server
}

func newPoolRig(t testing.TB, mc mock.Config, uc upcfg.Config) *poolRig {
	t.Helper()
	fc := clock.NewFake(t0)
	mc.Clock = fc
	mc.Seed = 1
	m, err := mock.New(mc)
	require.NoError(t, err)
	uc.Name, uc.Protocol, uc.BaseURL = "pool", cmp.Or(uc.Protocol, llm.Anthropic), "http://mock.invalid"
	if uc.APIKey == "" && len(uc.APIKeys) == 0 {
		uc.APIKey = "sk-pool"
	}
	if uc.JitterAllowance == 0 {
		uc.JitterAllowance = -1
	}
	d, err := dispatch.New(dispatch.Config{Config: uc, Clock: fc, HTTPClient: &http.Client{Transport: inProcess(m.Handler())}})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return &poolRig{d: d, fc: fc, mock: m}
}

// drain sends n requests at once and drives the fake clock event by event
// until every one has ended; it returns the fake time the drain took, the
// results and, per step, a hook (called while the system is quiet).
func (p *poolRig) drain(t testing.TB, n int, quiet func(now time.Time)) (time.Duration, []result) {
	t.Helper()
	var done atomic.Int32
	chans := p.submit(n, &done)
	limit := time.Now().Add(60 * time.Second)
	var last time.Time
	for int(done.Load()) < n {
		p.settle(t, n, &done)
		if int(done.Load()) >= n {
			break
		}
		if quiet != nil {
			quiet(p.fc.Now())
		}
		next, ok := p.fc.Next()
		require.True(t, ok, "nothing to wait for with %d of %d done", done.Load(), n)
		p.fc.Set(next)
		last = next
		require.True(t, time.Now().Before(limit), "drain does not end: %d of %d done", done.Load(), n)
	}
	return last.Sub(t0), collect(chans)
}

// submit sends n requests (deadline an hour away) through p.d at once;
// done counts those answered.
func (p *poolRig) submit(n int, done *atomic.Int32) []<-chan result {
	chans := make([]<-chan result, n)
	for i := range chans {
		r := request()
		r.Path = provider.EndpointChat.Path(p.d.Protocol()) // the same body serves either protocol
		r.Deadline = t0.Add(time.Hour)
		ch := make(chan result, 1)
		inner := doAsync(context.Background(), p.d, r)
		go func() { res := <-inner; done.Add(1); ch <- res }()
		chans[i] = ch
	}
	return chans
}

// collect waits for every result, in order.
func collect(chans []<-chan result) []result {
	out := make([]result, len(chans))
	for i, ch := range chans {
		out[i] = <-ch
	}
	return out
}

// settle returns once every request is done, queued or in flight and the
// admission loop has nothing to act on.
func (p *poolRig) settle(t testing.TB, n int, done *atomic.Int32) {
	t.Helper()
	waitQuiet(t, 20*time.Second, func() bool {
		s := p.d.Snapshot()
		return int(done.Load())+queued(s) == n && s.InFlight == 0 && dispatch.LoopIdle(p.d) || int(done.Load()) == n
	})
}

// waitQuiet returns once quiet holds three checks in a row (a request
// between two states shows in neither for a moment), each after the
// previous one's answer; it fails t after limit.
func waitQuiet(t testing.TB, limit time.Duration, quiet func() bool) {
	t.Helper()
	stable := 0
	require.Eventually(t, func() bool {
		for range 8 {
			runtime.Gosched()
		}
		if quiet() {
			stable++
		} else {
			stable = 0
		}
		return stable == 3
	}, limit, 50*time.Microsecond, "no quiet state")
}

// queued is how many requests s shows waiting, every class together.
func queued(s dispatch.Snapshot) int {
	q := 0
	for _, c := range s.Queued {
		q += c
	}
	return q
}

func keys(n int) []upcfg.Key {
	out := make([]upcfg.Key, n)
	for i := range out {
		out[i] = upcfg.Key{Key: fmt.Sprintf("sk-pool-%d", i)}
	}
	return out
}

func status429(st mock.Stats) int64 { return st.Overall.ByStatus["429"] }

// TestPoolDrainsInHalfTheTime: two keys on the mock, each with its own
// quota, drain a batch in half the time one key takes, with no provider
// 429 (≤ 0.5 %), and each key gets half the requests.
func TestPoolDrainsInHalfTheTime(t *testing.T) {
	t.Parallel()
	const n = 150
	lim := mock.Limits{RPM: 60}
	run := func(k int) (time.Duration, mock.Stats) {
		p := newPoolRig(t, mock.Config{Limits: lim, BurstSeconds: 5}, upcfg.Config{APIKeys: keys(k), Limits: upcfg.Limits{RequestsPerMinute: 60}, JitterAllowance: upcfg.JitterAllowanceDefault})
		took, res := p.drain(t, n, nil)
		for _, r := range res {
			require.NoError(t, r.err)
			require.Equal(t, 200, r.resp.StatusCode)
			require.Equal(t, "pool", r.resp.Upstream)
			require.Len(t, r.resp.Key, 8)
		}
		return took, p.mock.Stats()
	}
	one, st1 := run(1)
	two, st2 := run(2)
	ratio := two.Seconds() / one.Seconds()
	t.Logf("1 key: %v, 2 keys: %v (ratio %.3f); 429s %d / %d", one, two, ratio, status429(st1), status429(st2))
	require.InDelta(t, 0.5, ratio, 0.05, "two keys drain in half the time")
	require.LessOrEqual(t, float64(status429(st2)), 0.005*n)
	require.Len(t, st2.Keys, 2)
	for k, s := range st2.Keys {
		require.InDelta(t, n/2, s.ByStatus["200"], n/10, "key %s", k)
	}
}

// TestPoolRevokedKeyIsTakenOutAndProbedBack: a key revoked mid-run (the
// mock answers 401) costs no client a failure: its requests go to the
// other key without burning an attempt, it is out after one answer, and
// one request probes it back once the mock accepts it again.
func TestPoolRevokedKeyIsTakenOutAndProbedBack(t *testing.T) {
	t.Parallel()
	const n = 120
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 60}, BurstSeconds: 5},
		upcfg.Config{APIKeys: keys(2), Limits: upcfg.Limits{RequestsPerMinute: 60}, KeyProbeInterval: 20 * time.Second})
	revokedAt := time.Time{}
	restored := false
	_, res := p.drain(t, n, func(now time.Time) {
		switch {
		case revokedAt.IsZero() && now.Sub(t0) >= 10*time.Second:
			require.NoError(t, p.mock.RevokeKey("sk-pool-1", mock.KeyRevoked))
			revokedAt = now
		case !restored && !revokedAt.IsZero() && now.Sub(revokedAt) >= 30*time.Second:
			p.mock.RestoreKey("sk-pool-1")
			restored = true
		}
	})
	for _, r := range res {
		require.NoError(t, r.err)
		require.Equal(t, 200, r.resp.StatusCode, "no client-visible failure")
		require.Equal(t, 1, r.resp.Attempts-countRevokedTries(r), "a revoked key burns no attempt")
	}
	st := p.mock.Stats().Keys
	require.LessOrEqual(t, st["sk-pool-1"].ByStatus["401"], int64(3), "out within a few requests")
	ks := p.d.Keys()
	require.False(t, ks[1].Out, "probed back in: %+v", ks[1])
	require.EqualValues(t, 1, ks[1].Revoked)
	require.Greater(t, st["sk-pool-1"].ByStatus["200"], int64(0))
}

// countRevokedTries is how many of a response's attempts were answered by
// a revoked key: at most one here.
func countRevokedTries(r result) int {
	if r.resp.Attempts > 1 {
		return r.resp.Attempts - 1
	}
	return 0
}

// TestPoolOrgSharesAccountLimit: two keys of one org, the mock enforcing
// an account-level limit as low as one key's: the pool draws from the
// org's bucket too, so it sees no more 429s than one key does, and is no
// faster. (It is slower since a key's headers raise the key's own view to
// the provider's full burst: they describe the key's bucket, so they may
// only lower the org's, which spends the account's burst as it refills.)
func TestPoolOrgSharesAccountLimit(t *testing.T) {
	t.Parallel()
	const n = 120
	ks := keys(2)
	mc := mock.Config{Limits: mock.Limits{RPM: 60},
		Accounts: map[string]mock.Account{"acme": {Keys: []string{ks[0].Key, ks[1].Key}, Limits: mock.Limits{RPM: 60}}}}
	one := newPoolRig(t, mc, upcfg.Config{APIKeys: ks[:1], Limits: upcfg.Limits{RequestsPerMinute: 60}})
	t1, _ := one.drain(t, n, nil)
	for i := range ks {
		ks[i].Org = "acme"
	}
	two := newPoolRig(t, mc, upcfg.Config{APIKeys: ks, Limits: upcfg.Limits{RequestsPerMinute: 60},
		Orgs: map[string]upcfg.Org{"acme": {Limits: upcfg.Limits{RequestsPerMinute: 60}}}})
	t2, res := two.drain(t, n, nil)
	for _, r := range res {
		require.NoError(t, r.err)
	}
	t.Logf("one key %v (429s %d), two keys in one org %v (429s %d)", t1, status429(one.mock.Stats()), t2, status429(two.mock.Stats()))
	require.LessOrEqual(t, status429(two.mock.Stats()), status429(one.mock.Stats()))
	require.GreaterOrEqual(t, t2.Seconds(), t1.Seconds()*0.95, "the account's limit holds for the pool")
}

// TestPoolKeyOutReturnsOnlyThroughItsProbe: answers to requests a key
// took before it was revoked come back after it is out of the pool; they
// say nothing of the key now, and it stays out until its probe.
func TestPoolKeyOutReturnsOnlyThroughItsProbe(t *testing.T) {
	t.Parallel()
	p := newPoolRig(t, mock.Config{TTFT: time.Second}, upcfg.Config{APIKeys: keys(2), KeyProbeInterval: 20 * time.Second,
		Limits: upcfg.Limits{RequestsPerMinute: 6000}})
	var done atomic.Int32
	first := p.submit(4, &done) // two on each key, answering after 1 s
	waitQuiet(t, 20*time.Second, func() bool { return p.mock.Stats().Overall.InFlight == 4 })
	require.NoError(t, p.mock.RevokeKey("sk-pool-1", mock.KeyRevoked))
	second := p.submit(2, &done) // the one placed on the revoked key moves to the other
	waitQuiet(t, 20*time.Second, func() bool { return p.mock.Stats().Overall.InFlight == 6 && p.d.Keys()[1].Out })
	p.fc.Advance(time.Second) // the first four answer 200, two of them on the key now out
	for _, r := range collect(first) {
		require.NoError(t, r.err)
	}
	require.True(t, p.d.Keys()[1].Out, "answers to requests sent before it was revoked do not bring it back")
	p.fc.Advance(time.Second)
	for _, r := range collect(second) {
		require.NoError(t, r.err)
	}
	require.True(t, p.d.Keys()[1].Out)
	// Back only through its probe, once the provider accepts it again.
	p.mock.RestoreKey("sk-pool-1")
	p.fc.Advance(20 * time.Second)
	probe := p.submit(2, &done)
	waitQuiet(t, 20*time.Second, func() bool { return p.mock.Stats().Overall.InFlight == 2 })
	p.fc.Advance(time.Second)
	for _, r := range collect(probe) {
		require.NoError(t, r.err)
	}
	require.False(t, p.d.Keys()[1].Out, "its probe brought it back")
}

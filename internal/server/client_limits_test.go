package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// mockRig is a whole gateway (New and Start, no listener, no job queue)
// with the real engines of its upstreams over in-process mocks, on one
// fake clock: client limits, budgets and fallbacks are the admission
// layer's and the dispatchers', as in production. Upstream "a" unless
// the rig names others.
type mockRig struct {
	srv   *Server
	http  *httptest.Server
	clock *clock.Fake
	mock  *mock.Server            // upstream a's (or the first's)
	mocks map[string]*mock.Server // by upstream
}

func newMockRig(t *testing.T, mc mock.Config, clients []clients.Config, mutate ...func(*Config)) *mockRig {
	t.Helper()
	return newRig(t, rigSpec{mocks: []rigMock{{"a", mc}}, clients: clients, mutate: mutate})
}

// rigSpec shapes a mockRig: its upstreams (Anthropic, each on its own
// mock, at http://NAME.invalid), clients, config edits and logger.
type rigSpec struct {
	mocks   []rigMock
	clients []clients.Config
	mutate  []func(*Config)
	log     *slog.Logger
}

type rigMock struct {
	upstream string
	cfg      mock.Config
}

func newRig(t *testing.T, spec rigSpec) *mockRig {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	r := &mockRig{clock: fc, mocks: map[string]*mock.Server{}}
	handlers := map[string]http.Handler{}
	cfg := Config{Store: StoreNone, Clients: spec.clients}
	for _, x := range spec.mocks {
		x.cfg.Clock, x.cfg.Seed = fc, 1
		m, err := mock.New(x.cfg)
		require.NoError(t, err)
		r.mocks[x.upstream], handlers[x.upstream+".invalid"] = m, m.Handler()
		if r.mock == nil {
			r.mock = m
		}
		// A limit configured, so the engine does not hold its first
		// requests back until the provider's first headers.
		cfg.Upstreams = append(cfg.Upstreams, upcfg.Config{Name: x.upstream, Protocol: llm.Anthropic,
			BaseURL: "http://" + x.upstream + ".invalid", APIKey: upstreamKey, Limits: upcfg.Limits{RequestsPerMinute: 60_000}})
	}
	rt := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		handlers[req.URL.Host].ServeHTTP(rec, req)
		resp := rec.Result()
		resp.Request = req
		return resp, nil
	})
	for _, f := range spec.mutate {
		f(&cfg)
	}
	log := spec.log
	if log == nil {
		log = discardLogger()
	}
	srv, err := New(cfg, WithClock(fc), WithTransport(rt), WithoutListener(), WithLogger(log))
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	r.srv, r.http = srv, httptest.NewServer(srv.Handler())
	t.Cleanup(r.http.Close)
	return r
}

// send posts a messages request to upstream a with key and headers h in
// the background.
func (r *mockRig) send(t *testing.T, key string, h map[string]string) <-chan httpResult {
	t.Helper()
	return r.sendTo(t, "a", key, h)
}

// sendTo is send to the named upstream.
func (r *mockRig) sendTo(t *testing.T, upstream, key string, h map[string]string) <-chan httpResult {
	t.Helper()
	ch := make(chan httpResult, 1)
	req, err := http.NewRequestWithContext(t.Context(), "POST", r.http.URL+"/"+upstream+"/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	req.Header.Set("x-api-key", key)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	go func() {
		resp, err := r.http.Client().Do(req)
		if err != nil {
			ch <- httpResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- httpResult{status: resp.StatusCode, header: resp.Header, body: b, err: err}
	}()
	return ch
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// status reads /v1/status with key.
func (r *mockRig) status(t *testing.T, key string) opsview.StatusResponse {
	t.Helper()
	res := <-r.sendGet(t, "/v1/status", key)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(res.body, &st))
	return st
}

func (r *mockRig) sendGet(t *testing.T, path, key string) <-chan httpResult {
	t.Helper()
	ch := make(chan httpResult, 1)
	req, err := http.NewRequestWithContext(t.Context(), "GET", r.http.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("x-api-key", key)
	go func() {
		resp, err := r.http.Client().Do(req)
		if err != nil {
			ch <- httpResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- httpResult{status: resp.StatusCode, header: resp.Header, body: b, err: err}
	}()
	return ch
}

// queued is how many requests upstream a holds queued, every class.
func (r *mockRig) queued() int {
	n := 0
	for _, q := range r.srv.upstreams["a"].engine.(*dispatch.Dispatcher).Snapshot().Queued {
		n += q
	}
	return n
}

// TestClientLimitWaitsInTheQueue: over its own requests_per_minute a
// client's request waits in the upstream's queue, where it is counted in
// its class and named in the status (the client and the limit), and its
// x-sluice-queue-ms is that wait; refused at once, 429 naming the limit
// with retry-after from the client's bucket, when its deadline comes
// first; another client is not held. Fake clock through the real handlers
// and engine.
func TestClientLimitWaitsInTheQueue(t *testing.T) {
	t.Parallel()
	perSecond := admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60, BurstSeconds: 1}}
	r := newMockRig(t, mock.Config{}, []clients.Config{{Name: "a", Key: "ck-a", Limits: perSecond},
		{Name: "b", Key: "ck-b", Limits: perSecond}, {Name: "ops", Key: "ck-ops", Role: clients.RoleAdmin}})
	res := <-r.send(t, "ck-a", nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))

	res = <-r.send(t, "ck-a", map[string]string{"X-Sluice-Deadline": "500ms"})
	require.Equal(t, http.StatusTooManyRequests, res.status, string(res.body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, res.body, "rate_limit_error"), "client a's requests_per_minute (60) on a")
	require.Equal(t, "1", res.header.Get("Retry-After"), "from a's own bucket: one request a second")

	res = <-r.send(t, "ck-b", map[string]string{"X-Sluice-Deadline": "500ms"})
	require.Equal(t, http.StatusOK, res.status, "b has its own bucket: %s", res.body)

	waiting := r.send(t, "ck-a", map[string]string{"X-Sluice-Deadline": "30s", "X-Priority": "high"})
	require.Eventually(t, func() bool { return r.queued() == 1 }, 5*time.Second, time.Millisecond)
	st := r.status(t, "ck-ops")
	require.Equal(t, 1, st.Upstreams[0].Queued["high"], "counted in its class")
	require.Len(t, st.Upstreams[0].Held, 1)
	held := st.Upstreams[0].Held[0]
	require.Equal(t, "a", held.Client)
	require.Equal(t, "high", held.Priority)
	require.Equal(t, "client a's requests_per_minute (60) on a", held.Limit)
	require.Empty(t, r.status(t, "ck-b").Upstreams[0].Held, "b does not see a's holds")
	require.Len(t, r.status(t, "ck-a").Upstreams[0].Held, 1, "a sees its own")

	require.True(t, r.clock.WaitForTimers(2, 5*time.Second)) // its deadline, the loop's release
	r.clock.Advance(time.Second)
	res = <-waiting
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "1000", res.header.Get("X-Sluice-Queue-Ms"), "the wait for its client's room is queue time")
	require.EqualValues(t, 3, r.mock.Stats().Overall.ByStatus["200"], "the refused request never reached the provider")
}

// TestBudgetRefusedWithoutWaitingForTheClientLimit: a client over both
// its budget and its rate limit is refused by the budget at once, not
// after waiting for a rate slot.
func TestBudgetRefusedWithoutWaitingForTheClientLimit(t *testing.T) {
	t.Parallel()
	// Room for one request's worst case (its input and max_tokens), and
	// not for a second once the first's cost is settled.
	tab, err := pricing.NewTable(pricing.Config{}.WithDefaults())
	require.NoError(t, err)
	cost, err := provider.Estimate(llm.Anthropic, []byte(anthropicBody))
	require.NoError(t, err)
	m, err := tab.Lookup(cost.Model)
	require.NoError(t, err)
	worst := m.Price.Worst(cost, provider.CachePrefix{})
	r := newMockRig(t, mock.Config{OutputTokens: mock.OutputRange{Min: 16, Max: 16}}, []clients.Config{{Name: "a", Key: "ck-a",
		Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 1, BurstSeconds: 1}},
		Budget: admit.Budget{Total: worst.Dollars() * 1.01}}})
	res := <-r.send(t, "ck-a", nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	start := r.clock.Now()
	res = <-r.send(t, "ck-a", nil)
	require.Equal(t, http.StatusPaymentRequired, res.status, string(res.body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, res.body, "billing_error"), "total budget")
	require.Equal(t, start, r.clock.Now(), "answered at once")
	require.Zero(t, r.queued())
}

// TestClientMaxConcurrency: a client at its max_concurrency waits in the
// queue until one of its own requests ends, and is refused 429 naming the
// limit when its deadline passes first; other clients are not held.
func TestClientMaxConcurrency(t *testing.T) {
	t.Parallel()
	one := admit.ClientLimits{LimitValues: admit.LimitValues{MaxConcurrency: 1}}
	r := newMockRig(t, mock.Config{TTFT: 10 * time.Second}, []clients.Config{{Name: "a", Key: "ck-a", Limits: one}, {Name: "b", Key: "ck-b", Limits: one}})
	first := r.send(t, "ck-a", nil)
	require.Eventually(t, func() bool { return r.mock.Stats().Overall.InFlight == 1 }, 5*time.Second, time.Millisecond)
	other := r.send(t, "ck-b", nil)
	require.Eventually(t, func() bool { return r.mock.Stats().Overall.InFlight == 2 }, 5*time.Second, time.Millisecond, "b's slot is its own")

	late := r.send(t, "ck-a", map[string]string{"X-Sluice-Deadline": "2s"})
	require.Eventually(t, func() bool { return r.queued() == 1 }, 5*time.Second, time.Millisecond)
	require.True(t, r.clock.WaitForTimers(3, 5*time.Second)) // two TTFTs, its deadline
	r.clock.Advance(2 * time.Second)
	res := <-late
	require.Equal(t, http.StatusTooManyRequests, res.status, string(res.body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, res.body, "rate_limit_error"), "client a's max_concurrency (1) on a")

	waiting := r.send(t, "ck-a", map[string]string{"X-Sluice-Deadline": "30s"})
	require.Eventually(t, func() bool { return r.queued() == 1 }, 5*time.Second, time.Millisecond)
	require.True(t, r.clock.WaitForTimers(3, 5*time.Second))
	r.clock.Advance(8 * time.Second) // the first two answer
	require.Equal(t, http.StatusOK, (<-first).status)
	require.Equal(t, http.StatusOK, (<-other).status)
	require.Eventually(t, func() bool { return r.mock.Stats().Overall.InFlight == 1 }, 5*time.Second, time.Millisecond,
		"the freed slot went to a's waiting request")
	require.True(t, r.clock.WaitForTimers(2, 5*time.Second))
	r.clock.Advance(10 * time.Second)
	res = <-waiting
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, "8000", res.header.Get("X-Sluice-Queue-Ms"))
}

// TestClientLimitsHoldJobs: a job's call is admitted under its client's
// limits without waiting. Over them it is held back (an *admit.HeldError, not
// a refusal, nothing sent) until the client's next free turn (each held
// job a later one, at the client's rate, so they do not all come back at
// once); another client is not affected; a finished call frees its
// concurrency slot; a call that can never fit is refused for good.
func TestClientLimitsHoldJobs(t *testing.T) {
	t.Parallel()
	perSecond := admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60, BurstSeconds: 1}}
	one := admit.ClientLimits{LimitValues: admit.LimitValues{MaxConcurrency: 1}}
	tiny := admit.ClientLimits{LimitValues: admit.LimitValues{TokensPerMinute: 10}}
	ts := newTestServer(t, []clients.Config{{Name: "a", Key: "ck-a", Limits: perSecond}, {Name: "b", Key: "ck-b", Limits: perSecond},
		{Name: "c", Key: "ck-c", Limits: one}, {Name: "d", Key: "ck-d", Limits: tiny}, {Name: "free", Key: "ck-free"}})
	layer := ts.srv.admit
	route, ok := layer.RouteJobs("a", llm.Low, "", provider.Cost{})
	require.True(t, ok)
	target := route.Target
	now := ts.clock.Now()
	req := func(client string) *dispatch.Request {
		return &dispatch.Request{Client: client, Priority: llm.Low, Cost: provider.Cost{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 16}}
	}
	h, err := layer.AdmitNow(target, req("a"))
	require.NoError(t, err, "a's first call fits its burst")
	var turns []time.Time
	for range 3 {
		_, err := layer.AdmitNow(target, req("a"))
		var held *admit.HeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, "client a's requests_per_minute (60) on a", held.Limit)
		turns = append(turns, held.RetryAt)
	}
	require.Equal(t, []time.Time{now.Add(time.Second), now.Add(2 * time.Second), now.Add(3 * time.Second)}, turns,
		"the held jobs come back one at a time, at a's rate")
	h.Settle(dispatch.End{}, true)
	_, err = layer.AdmitNow(target, req("b"))
	require.NoError(t, err, "b has its own bucket")
	_, err = layer.AdmitNow(target, req("free"))
	require.NoError(t, err, "a client without limits is not held")

	hc, err := layer.AdmitNow(target, req("c"))
	require.NoError(t, err)
	_, err = layer.AdmitNow(target, req("c"))
	var held *admit.HeldError
	require.ErrorAs(t, err, &held, "c is at its max_concurrency")
	require.Equal(t, "client c's max_concurrency (1) on a", held.Limit)
	hc.Settle(dispatch.End{}, false)
	_, err = layer.AdmitNow(target, req("c"))
	require.NoError(t, err, "the slot came back with the call")

	_, err = layer.AdmitNow(target, req("d"))
	var de *dispatch.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, http.StatusBadRequest, de.Status, "26 tokens never fit 10 a minute: the job dies")
	require.Empty(t, ts.a.calls(), "nothing reached the engine")
}

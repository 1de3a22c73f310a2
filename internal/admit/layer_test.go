package admit_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// engine is an Engine written for these tests: it answers every Do with
// its script's next outcome and records what it was sent.
type engine struct {
	name        string
	unavailable bool
	wait        time.Duration // PredictWait's answer
	fail        error         // Do's error; nil answers 200
	once        error         // the next Do's error only (failOnce)

	mu   sync.Mutex
	sent []dispatch.Request
}

func (e *engine) Do(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	e.mu.Lock()
	e.sent = append(e.sent, *req)
	once := e.once
	e.once = nil
	e.mu.Unlock()
	if once != nil {
		return nil, once
	}
	if e.fail != nil {
		return nil, e.fail
	}
	return &dispatch.Response{Response: &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}},
		Attempts: 1, Upstream: e.name}, nil
}

func (e *engine) Unavailable() bool { return e.unavailable }

// failOnce makes the next Do fail with err.
func (e *engine) failOnce(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.once = err
}

func (e *engine) PredictWait(provider.Cost, llm.Priority, string) (time.Duration, bool) {
	return e.wait, e.unavailable
}

func (e *engine) calls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sent)
}

// rig is a Layer over two Anthropic upstreams, "main" falling back to
// "backup" (model claude-sonnet-4-5 sent there as claude-haiku-4-5).
type rig struct {
	l            *admit.Layer
	fc           *clock.Fake
	main, backup *engine
}

func newRig(t *testing.T, clients ...admit.Client) *rig {
	t.Helper()
	fc := clock.NewFake(t0)
	r := &rig{fc: fc, main: &engine{name: "main"}, backup: &engine{name: "backup"}}
	l, err := admit.New(admit.Config{
		Clients: clients,
		Upstreams: []upstream.Config{
			{Name: "main", Protocol: llm.Anthropic, Fallbacks: []upstream.Fallback{{Upstream: "backup", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}},
			{Name: "backup", Protocol: llm.Anthropic},
		},
		Clock: fc,
	})
	require.NoError(t, err)
	l.Bind(map[string]admit.Engine{"main": r.main, "backup": r.backup})
	r.l = l
	return r
}

func request(client string) *dispatch.Request {
	return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Client: client, Priority: llm.High,
		Body: []byte(`{"model":"claude-sonnet-4-5","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`),
		Cost: provider.Cost{Model: "claude-sonnet-4-5", InputTokens: 1000, OutputTokens: 1000}}
}

// TestLiveAndJobGetTheSameAnswer: for the same client, budget and
// upstream state, a live request (Do) and a job's call, taken the way the
// job worker takes it (RouteJobs for its class, the route for its
// deadline, AdmitNow there, and Reroute after a failed attempt), get the
// same refusal (status, error type, retry-after) and go to the same
// upstream for the same reason.
func TestLiveAndJobGetTheSameAnswer(t *testing.T) {
	t.Parallel()
	// What a dispatcher answers a live request's FailFast attempt in a new
	// outage, and a job's one attempt (a ticket's call).
	overload := llm.Outcome{Kind: llm.Overload, Status: 529}
	liveOutage := &dispatch.Error{Reason: dispatch.ErrUnavailable, Status: 529, Attempts: 1, Last: &overload}
	jobOutage := &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Attempts: 1, Last: &overload}
	for _, tc := range []struct {
		name     string
		budget   admit.Budget
		spent    int // requests of the same cost settled before
		state    func(r *rig)
		failMain bool   // main's first attempt fails in a new outage
		status   int    // 0: admitted
		typ      string // the error type of a refusal
		retry    bool   // a refusal with a retry-after
		servedBy string
		reason   string
	}{
		{name: "admitted on its upstream", servedBy: "main"},
		{name: "breaker open: the fallback at once", state: func(r *rig) { r.main.unavailable = true }, servedBy: "backup", reason: admit.FallbackUnavailable},
		{name: "predicted past the deadline: the fallback", state: func(r *rig) { r.main.wait = time.Hour }, servedBy: "backup", reason: admit.FallbackDeadline},
		{name: "predicted wait within the deadline: its upstream", state: func(r *rig) { r.main.wait = 30 * time.Second }, servedBy: "main"},
		{name: "first failure of a new outage: the fallback after it", failMain: true, servedBy: "backup", reason: admit.FallbackUnavailable},
		{name: "both unavailable: its own upstream", state: func(r *rig) { r.main.unavailable, r.backup.unavailable = true, true }, servedBy: "main"},
		{name: "day budget exhausted: 429 until midnight", budget: admit.Budget{Day: 0.02}, spent: 1, status: 429, typ: "rate_limit_error", retry: true},
		{name: "total budget exhausted: 402", budget: admit.Budget{Total: 0.02}, spent: 1, status: 402, typ: "billing_error"},
		{name: "worst case over the budget: 400", budget: admit.Budget{Day: 0.001}, status: 400, typ: "invalid_request_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, admit.Client{Name: "acme", Budget: tc.budget})
			for range tc.spent {
				a, err := r.l.AdmitNow(mustRoute(t, r.l, "main"), request("acme"))
				require.NoError(t, err)
				a.Settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, HasUsage: true,
					Usage: llm.Usage{InputTokens: 1000, OutputTokens: 1000}}, true)
			}
			if tc.state != nil {
				tc.state(r)
			}
			deadline := t0.Add(time.Minute)

			// The live door.
			if tc.failMain {
				r.main.failOnce(liveOutage)
			}
			var trail admit.Trail
			live := request("acme")
			live.Deadline = deadline
			resp, liveErr := r.l.Do(context.Background(), "main", live, false, &trail)
			// The job door, as the worker takes it: the class's route, the
			// one for the job's deadline (its urgent claim), then its call.
			route, ok := r.l.RouteJobs("main", llm.High, "sluice-jobs", request("acme").Cost)
			require.True(t, ok)
			target := route.For(deadline)
			reason := target.Reason()
			job := target.Rewrite(*request("acme"))
			adm, jobErr := r.l.AdmitNow(target, &job)
			if tc.failMain && jobErr == nil {
				adm.Settle(dispatch.End{}, false) // its attempt failed in the outage
				next, ok := r.l.Reroute(target, llm.High, "sluice-jobs", request("acme").Cost, deadline, jobOutage)
				require.True(t, ok, "the first failure of an outage sends the job on")
				target, reason = next, next.Reason()
				job = target.Rewrite(*request("acme"))
				adm, jobErr = r.l.AdmitNow(target, &job)
			}

			if tc.status == 0 {
				require.NoError(t, liveErr)
				require.NoError(t, jobErr)
				require.Equal(t, tc.servedBy, trail.ServedBy())
				require.Equal(t, tc.servedBy, target.Upstream, "the same fallback decision")
				require.Equal(t, tc.reason, reason)
				require.NoError(t, resp.Body.Close())
				adm.Settle(dispatch.End{}, false)
				return
			}
			var lr, jr *admit.RefusalError
			require.ErrorAs(t, liveErr, &lr)
			require.ErrorAs(t, jobErr, &jr)
			require.Equal(t, tc.status, lr.Problem.Status)
			require.Equal(t, lr.Problem.Status, jr.Problem.Status)
			require.Equal(t, tc.typ, cmp.Or(lr.Problem.Type, provider.ErrorTypeFor(llm.Anthropic, lr.Problem.Status)))
			require.Equal(t, lr.Problem.Type, jr.Problem.Type)
			require.Equal(t, lr.Problem.RetryAfter, jr.Problem.RetryAfter)
			require.Equal(t, tc.retry, lr.Problem.RetryAfter > 0)
			require.Equal(t, tc.retry, !jr.RetryAt.IsZero(), "a job waits in the store until then, or dies")
			require.Zero(t, r.main.calls()+r.backup.calls(), "nothing was sent for either")
		})
	}
}

// TestRerouteOnlyAfterAnOutage: a job's failed attempt goes on to the
// fallback only for a failure a fallback helps with, and only to a
// fallback that can take it now.
func TestRerouteOnlyAfterAnOutage(t *testing.T) {
	t.Parallel()
	overload := llm.Outcome{Kind: llm.Overload, Status: 529}
	rate := llm.Outcome{Kind: llm.Rate, Status: 429}
	for _, tc := range []struct {
		name  string
		err   error
		state func(r *rig)
		to    string // "": it stays
	}{
		{"overloaded: the fallback", &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Last: &overload}, nil, "backup"},
		{"rate limited: it stays", &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 429, Last: &rate}, nil, ""},
		{"not sent: it stays", &dispatch.Error{Reason: dispatch.ErrNotAdmitted, Status: 429}, nil, ""},
		{"the fallback unavailable too: it stays", &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Last: &overload},
			func(r *rig) { r.backup.unavailable = true }, ""},
		{"the fallback predicted past the deadline: it stays", &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Last: &overload},
			func(r *rig) { r.backup.wait = time.Hour }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			if tc.state != nil {
				tc.state(r)
			}
			from := mustRoute(t, r.l, "main")
			next, ok := r.l.Reroute(from, llm.High, "sluice-jobs", provider.Cost{}, t0.Add(time.Minute), tc.err)
			require.Equal(t, tc.to != "", ok)
			require.Equal(t, tc.to, next.Upstream)
			if ok {
				_, again := r.l.Reroute(next, llm.High, "sluice-jobs", provider.Cost{}, t0.Add(time.Minute), tc.err)
				require.False(t, again, "no fallback after the last one")
			}
		})
	}
}

func mustRoute(t *testing.T, l *admit.Layer, name string) admit.Target {
	t.Helper()
	route, ok := l.RouteJobs(name, llm.High, "", provider.Cost{})
	require.True(t, ok)
	return route.Target
}

// TestFallbackAfterOneFailedAttempt: a live request whose upstream fails
// with an outage goes to the fallback (the model rewritten) and the trail
// names both upstreams with their attempts; an answer no fallback changes
// (the client's own error) is returned as it is.
func TestFallbackAfterOneFailedAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.main.fail = &dispatch.Error{Reason: dispatch.ErrUnavailable, Status: 529, Attempts: 1}
	var trail admit.Trail
	resp, err := r.l.Do(context.Background(), "main", request("acme"), false, &trail)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "main:1,backup:1", trail.String())
	require.Equal(t, "backup", trail.ServedBy())
	require.True(t, r.main.sent[0].FailFast, "one attempt on an upstream that has a fallback")
	require.Equal(t, "claude-haiku-4-5", r.backup.sent[0].Cost.Model, "priced as the model it is sent as")
	require.Contains(t, string(r.backup.sent[0].Body), "claude-haiku-4-5")

	r = newRig(t)
	r.main.fail = &dispatch.Error{Reason: dispatch.ErrTooLarge, Status: 413}
	_, err = r.l.Do(context.Background(), "main", request("acme"), false, nil)
	require.ErrorIs(t, err, dispatch.ErrTooLarge)
	require.Zero(t, r.backup.calls())

	r = newRig(t)
	r.main.fail = &dispatch.Error{Reason: dispatch.ErrUnavailable, Status: 529}
	_, err = r.l.Do(context.Background(), "main", request("acme"), true, nil)
	require.True(t, errors.Is(err, dispatch.ErrUnavailable), "opted out: no fallback")
	require.Zero(t, r.backup.calls())
}

// TestJobHeldByItsClientLimit: a job's call over its client's own limit is
// held (not refused, not an attempt) until its client's next free turn;
// the jobs a client has over its limit come back one at a time.
func TestJobHeldByItsClientLimit(t *testing.T) {
	t.Parallel()
	r := newRig(t, admit.Client{Name: "acme", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 2, BurstSeconds: 30}}})
	target := mustRoute(t, r.l, "main")
	a, err := r.l.AdmitNow(target, request("acme"))
	require.NoError(t, err, "one request fits the 30 s bucket of 2 a minute")
	var h1, h2 *admit.HeldError
	_, err = r.l.AdmitNow(target, request("acme"))
	require.ErrorAs(t, err, &h1)
	require.Equal(t, t0.Add(30*time.Second), h1.RetryAt)
	require.Equal(t, "client acme's requests_per_minute (2) on main", h1.Limit)
	_, err = r.l.AdmitNow(target, request("acme"))
	require.ErrorAs(t, err, &h2)
	require.Equal(t, t0.Add(time.Minute), h2.RetryAt, "the next turn, not the same instant")
	a.Settle(dispatch.End{}, false)
	_, err = r.l.AdmitNow(target, request("other"))
	require.NoError(t, err, "another client is not held")
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/sluicehq/sluice/internal/admit"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

var fbT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fbRig struct {
	s      *Server
	fc     *clock.Fake
	mocks  map[string]*mock.Server
	engine map[string]*dispatch.Dispatcher
}

// newFallbackRig builds a Server holding real dispatchers over in-process
// mocks, all on one fake clock: "primary" (falling back to "fallback").
func newFallbackRig(t *testing.T, primary, fallback mock.Config, mod func(p, f *upcfg.Config)) *fbRig {
	t.Helper()
	fc := clock.NewFake(fbT0)
	r := &fbRig{s: &Server{clock: fc, upstreams: map[string]*upstream{}}, fc: fc, mocks: map[string]*mock.Server{}, engine: map[string]*dispatch.Dispatcher{}}
	pc := upcfg.Config{Name: "primary", Protocol: llm.Anthropic, BaseURL: "http://primary.invalid", APIKey: "sk-p",
		Fallbacks: []upcfg.Fallback{{Upstream: "fallback", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}}
	fcfg := upcfg.Config{Name: "fallback", Protocol: llm.Anthropic, BaseURL: "http://fallback.invalid", APIKey: "sk-f"}
	if mod != nil {
		mod(&pc, &fcfg)
	}
	for _, x := range []struct {
		uc upcfg.Config
		mc mock.Config
	}{{pc, primary}, {fcfg, fallback}} {
		x.mc.Clock, x.mc.Seed = fc, 1
		m, err := mock.New(x.mc)
		require.NoError(t, err)
		h := m.Handler()
		rt := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			resp := rec.Result()
			resp.Request = req
			return resp, nil
		})
		d, err := dispatch.New(dispatch.Config{Config: x.uc, Clock: fc, HTTPClient: &http.Client{Transport: rt}})
		require.NoError(t, err)
		require.NoError(t, d.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
		r.s.upstreams[x.uc.Name] = &upstream{cfg: x.uc, engine: d}
		r.mocks[x.uc.Name], r.engine[x.uc.Name] = m, d
	}
	layer, err := admit.New(admit.Config{Upstreams: []upcfg.Config{pc, fcfg}, Clock: fc})
	require.NoError(t, err)
	layer.Bind(map[string]admit.Engine{"primary": r.engine["primary"], "fallback": r.engine["fallback"]})
	r.s.admit = layer
	return r
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type fbResult struct {
	resp *dispatch.Response
	err  error
}

// send routes one request and moves the fake clock in small steps until
// it is answered; it returns the answer and the fake time it took.
func (r *fbRig) send(t *testing.T, class llm.Priority, deadline time.Duration, h http.Header) (fbResult, time.Duration) {
	t.Helper()
	ch := r.sendAsync(class, deadline, h)
	start := r.fc.Now()
	// Let the routing decision happen before fake time moves: a request
	// that can be answered (or shed, or sent to a fallback) at once must
	// not see the buckets refilled by a clock running ahead of a slow
	// scheduler.
	select {
	case res := <-ch:
		return res, 0
	case <-time.After(settleWait):
	}
	limit := time.Now().Add(20 * time.Second)
	for {
		for range 4 {
			runtime.Gosched()
		}
		select {
		case res := <-ch:
			return res, r.fc.Now().Sub(start)
		case <-time.After(200 * time.Microsecond):
		}
		r.fc.Advance(50 * time.Millisecond)
		require.True(t, time.Now().Before(limit), "no answer")
	}
}

// settleWait is how long send waits, in real time, for an answer that
// needs no fake time before it starts moving the clock.
const settleWait = 500 * time.Millisecond

func (r *fbRig) sendAsync(class llm.Priority, deadline time.Duration, h http.Header) <-chan fbResult {
	req := &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Header: http.Header{},
		Body:     []byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`),
		Cost:     provider.Cost{Model: "claude-sonnet-4-5", InputTokens: 50, OutputTokens: 100},
		Priority: class}
	if deadline > 0 {
		req.Deadline = r.fc.Now().Add(deadline)
	}
	if h == nil {
		h = http.Header{}
	}
	ch := make(chan fbResult, 1)
	go func() {
		noFallback := strings.EqualFold(h.Get(HeaderFallback), "off")
		resp, err := r.s.admit.Do(context.Background(), "primary", req, noFallback, nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		ch <- fbResult{resp, err}
	}()
	return ch
}

// TestFallbackDuringOutage: the primary is in a 30 s outage; every request
// is served (by the fallback while the primary is down, its model
// rewritten), the primary sees only its breaker's probes, and traffic is
// back on the primary within 5 s of its recovery.
func TestFallbackDuringOutage(t *testing.T) {
	t.Parallel()
	r := newFallbackRig(t, mock.Config{Faults: mock.Faults{Outages: []mock.Outage{{Start: 5 * time.Second, Duration: 30 * time.Second}}}}, mock.Config{}, nil)
	var firstBack time.Duration
	for r.fc.Now().Sub(fbT0) < 50*time.Second {
		sent := r.fc.Now().Sub(fbT0)
		res, _ := r.send(t, llm.Normal, 0, nil)
		require.NoError(t, res.err, "at %v", sent)
		require.Equal(t, 200, res.resp.StatusCode)
		switch {
		case sent < 5*time.Second:
			require.Equal(t, "primary", res.resp.Upstream, "at %v", sent)
		case sent >= 8*time.Second && sent < 35*time.Second:
			require.Equal(t, "fallback", res.resp.Upstream, "at %v", sent)
		case sent >= 35*time.Second && res.resp.Upstream == "primary" && firstBack == 0:
			firstBack = sent
		case firstBack > 0:
			require.Equal(t, "primary", res.resp.Upstream, "at %v: back for good", sent)
		}
		r.fc.Advance(250 * time.Millisecond)
	}
	require.NotZero(t, firstBack)
	require.LessOrEqual(t, firstBack, 40*time.Second, "traffic back within 5 s of the recovery")
	pst := r.mocks["primary"].Stats().Overall.ByStatus
	t.Logf("back on the primary at %v; primary answers %v, fallback answers %v", firstBack, pst, r.mocks["fallback"].Stats().Overall.ByStatus)
	// The first requests of the outage make their attempts until the
	// breaker opens; then one probe per open period (~3 s).
	require.LessOrEqual(t, pst["529"], int64(8+30/2), "the primary gets only probes: %v", pst)
	require.Positive(t, r.mocks["fallback"].Stats().Overall.ByStatus["200"])
}

// TestFallbackForACriticalDeadline: the primary is saturated by low work;
// a critical request with a 2 s deadline is served by the fallback, a low
// one waits on the primary, and X-Sluice-Fallback: off keeps a request on
// the primary.
func TestFallbackForACriticalDeadline(t *testing.T) {
	t.Parallel()
	// The mock's bucket holds one request (10 s at 6 a minute): the engine,
	// raising its view from the mock's headers, can find no more room.
	r := newFallbackRig(t, mock.Config{Limits: mock.Limits{RPM: 6}, BurstSeconds: 10}, mock.Config{}, func(p, _ *upcfg.Config) {
		p.Limits.RequestsPerMinute = 6
		p.FallbackClasses = []string{"critical", "high"}
	})
	var lows []<-chan fbResult
	for range 12 {
		lows = append(lows, r.sendAsync(llm.Low, time.Hour, nil))
	}
	// The low requests take the bucket's room (as deep as the mock's
	// headers show it) and the rest queue; with the fake clock still, the
	// queue then stays as it is.
	last := -1
	require.Eventually(t, func() bool {
		s := r.engine["primary"].Snapshot()
		q := s.Queued[llm.Low]
		settled := q > 0 && q == last && s.InFlight == 0
		last = q
		return settled
	}, 10*time.Second, 20*time.Millisecond, "low requests queued on the primary")
	res, took := r.send(t, llm.Critical, 2*time.Second, nil)
	require.NoError(t, res.err)
	require.Equal(t, "fallback", res.resp.Upstream)
	require.Less(t, took, 2*time.Second)

	res, _ = r.send(t, llm.Critical, 2*time.Second, http.Header{HeaderFallback: {"off"}})
	require.Error(t, res.err, "fallback off: shed on the primary")

	low, _ := r.send(t, llm.Low, time.Hour, nil)
	require.NoError(t, low.err)
	require.Equal(t, "primary", low.resp.Upstream, "a low request waits on the primary")
	for _, ch := range lows {
		var x fbResult
		require.Eventually(t, func() bool {
			select {
			case x = <-ch:
				return true
			default:
				r.fc.Advance(time.Second) // the bucket refills until the low request is sent
				return false
			}
		}, 30*time.Second, 100*time.Microsecond, "the low request is served")
		require.NoError(t, x.err)
		require.Equal(t, "primary", x.resp.Upstream)
	}
}

// TestJobFallsBackThroughGateway: the first job into a new outage (its
// upstream's breaker still closed) is served by the fallback after its one
// failed attempt, through the real gateway, dispatchers and mocks; the
// jobs API names the upstream of each attempt and the one that served.
func TestJobFallsBackThroughGateway(t *testing.T) {
	t.Parallel()
	down, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Faults: mock.Faults{Outages: []mock.Outage{{Duration: time.Hour}}}})
	require.NoError(t, err)
	up, err := mock.New(mock.Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	for _, m := range []*mock.Server{down, up} {
		require.NoError(t, m.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	}
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{
			{Name: "primary", Protocol: llm.Anthropic, BaseURL: down.URL(), APIKey: "sk-p",
				Fallbacks: []upcfg.Fallback{{Upstream: "backup", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}},
			{Name: "backup", Protocol: llm.Anthropic, BaseURL: up.URL(), APIKey: "sk-b"},
		},
		Jobs: jobs.Settings{MaxAttempts: 5}}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	code, body := call(t, "POST", base+"/v1/jobs", "", `{"upstream":"primary","priority":"high",
		"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var job struct {
		ID       json.Number `json:"id"`
		State    string      `json:"state"`
		Upstream string      `json:"upstream"`
		ServedBy string      `json:"served_by"`
		Attempts int         `json:"attempts"`
		Errors   []struct {
			Status   int    `json:"status"`
			Upstream string `json:"upstream"`
		} `json:"errors"`
		Response *struct {
			Headers map[string]string `json:"headers"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &job))
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/jobs/"+job.ID.String()+"?wait=5s", "", "")
		require.NoError(t, json.Unmarshal(b, &job))
		return job.State == "succeeded"
	}, 60*time.Second, time.Millisecond)
	require.Equal(t, "primary", job.Upstream)
	require.Equal(t, "backup", job.Response.Headers["X-Sluice-Upstream"])
	require.Equal(t, "backup", job.ServedBy)
	require.Equal(t, 2, job.Attempts, "its failed attempt and the fallback's")
	require.Len(t, job.Errors, 1)
	require.Equal(t, 529, job.Errors[0].Status)
	require.Equal(t, "primary", job.Errors[0].Upstream)
	require.Equal(t, int64(1), down.Stats().Overall.ByStatus["529"], "one failed attempt on the primary, then the fallback at once")
	require.Equal(t, int64(1), up.Stats().Overall.ByStatus["200"])
}

// TestJobsPacedByTheirClientLimit: a client's jobs go out at its own
// requests_per_minute through the real gateway, worker and mock: all
// served, none burning an attempt on the limit, and never faster than
// the limit allows.
func TestJobsPacedByTheirClientLimit(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	const n, rpm = 8, 120 // two a second, a burst of two
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}},
		Clients:   []clients.Config{{Name: "batch", Key: "ck-batch", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: rpm, BurstSeconds: 1}}}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	var ids []string
	for i := range n {
		code, body := call(t, "POST", base+"/v1/jobs", "ck-batch", fmt.Sprintf(`{"upstream":"claude",
			"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"job %d"}]}}`, i))
		require.Equal(t, http.StatusAccepted, code, string(body))
		var j struct {
			ID json.Number `json:"id"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		ids = append(ids, j.ID.String())
	}
	var first, last time.Time
	for _, id := range ids {
		var j struct {
			State      string    `json:"state"`
			Attempts   int       `json:"attempts"`
			FinishedAt time.Time `json:"finished_at"`
		}
		require.Eventually(t, func() bool {
			_, b := call(t, "GET", base+"/v1/jobs/"+id+"?wait=5s", "ck-batch", "")
			require.NoError(t, json.Unmarshal(b, &j))
			return j.State == "succeeded"
		}, 60*time.Second, time.Millisecond, "job %s", id)
		require.LessOrEqual(t, j.Attempts, 1, "the limit burns no attempt")
		if first.IsZero() || j.FinishedAt.Before(first) {
			first = j.FinishedAt
		}
		if j.FinishedAt.After(last) {
			last = j.FinishedAt
		}
	}
	// n calls at two a second after a burst of two: at least 2.5 s from
	// the first answer to the last (less a little for answer times).
	require.GreaterOrEqual(t, last.Sub(first), time.Duration(float64(n-2-1)*float64(time.Minute)/rpm),
		"the client's jobs never went faster than its limit")
	require.Equal(t, int64(n), m.Stats().Overall.ByStatus["200"])
}

// TestFirstRequestIntoAnOutageFallsBackAtOnce: the first request to meet
// a new outage of its upstream is served by the fallback after that one
// failed attempt, with no backoff (no fake time passes), and its log line
// names the upstream that served it and the attempts on each.
func TestFirstRequestIntoAnOutageFallsBackAtOnce(t *testing.T) {
	t.Parallel()
	log, logs := capturedLogger(slog.LevelInfo)
	r := newRig(t, rigSpec{
		mocks:  []rigMock{{"primary", mock.Config{Faults: mock.Faults{Outages: []mock.Outage{{Duration: time.Hour}}}}}, {"backup", mock.Config{}}},
		mutate: []func(*Config){func(c *Config) { c.Upstreams[0].Fallbacks = []upcfg.Fallback{{Upstream: "backup"}} }},
		log:    log,
	})
	start := r.clock.Now()
	res := <-r.sendTo(t, "primary", "any", nil)
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Equal(t, start, r.clock.Now(), "no backoff before the fallback")
	require.Equal(t, "backup", res.header.Get("X-Sluice-Upstream"))
	require.Equal(t, "2", res.header.Get("X-Sluice-Attempts"), "one on each")
	require.EqualValues(t, 1, r.mocks["primary"].Stats().Overall.ByStatus["529"], "one failed attempt on the primary")
	line := logs.waitLines(t, "request", 1)[0]
	require.Equal(t, "primary", line["upstream"])
	require.Equal(t, "backup", line["served_by"])
	require.Equal(t, "primary:1,backup:1", line["tried"])
	require.EqualValues(t, 2, line["attempts"])
}

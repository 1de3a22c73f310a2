package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestMain(m *testing.M) {
	if os.Getenv(gatewayEnv) != "" {
		os.Exit(runTestGateway())
	}
	goleak.VerifyTestMain(m)
}

// fakeDispatcher answers Do with fn and counts the calls.
type fakeDispatcher struct {
	mu    sync.Mutex
	calls int
	fn    func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error)
}

func (f *fakeDispatcher) Acquire(context.Context, dispatch.AcquireParams) (*dispatch.Ticket, error) {
	return dispatch.NewTicketFunc(f.Do), nil
}

func (f *fakeDispatcher) TryAcquire(dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	return dispatch.NewTicketFunc(f.Do), true
}

// Unavailable makes it an admit.Engine: never in an outage.
func (f *fakeDispatcher) Unavailable() bool { return false }

func (f *fakeDispatcher) Do(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.fn(ctx, req)
}

// gated returns a dispatcher whose calls signal entered, then answer 200
// with body once release is called (release is idempotent), or end with
// their context: a test that fails while a call is held still stops its
// service (Stop aborts the call) instead of hanging.
func gated(body string) (d *fakeDispatcher, entered <-chan struct{}, release func()) {
	in := make(chan struct{}, 1)
	rel := make(chan struct{})
	var once sync.Once
	d = &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		in <- struct{}{}
		select {
		case <-rel:
			return reply(200, body), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}}
	return d, in, func() { once.Do(func() { close(rel) }) }
}

func (f *fakeDispatcher) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// reply builds a dispatcher response, with the outcome the engine would
// give it.
func reply(status int, body string) *dispatch.Response {
	h := http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_test"}}
	return &dispatch.Response{Response: &http.Response{
		StatusCode: status,
		Header:     h,
		Body:       io.NopCloser(strings.NewReader(body)),
	}, Attempts: 1, Outcome: provider.Classify(llm.Anthropic, status, h, []byte(body), time.Now())}
}

const okMessage = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":3}}`

const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`

func succeed() *fakeDispatcher {
	return &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return reply(200, okMessage), nil
	}}
}

func openStore(t testing.TB) jobstore.Store {
	t.Helper()
	st, err := jobstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "jobs.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// testService is a Service with the job API over it, as the gateway serves
// them: Handler is the API.
type testService struct {
	*Service
	api *jobsapi.API
}

// Handler returns the job API over the service.
func (s *testService) Handler() http.Handler { return s.api }

// newService builds a service over a fresh store with upstream "claude"
// (anthropic) served by d and "gpt" (openai) served by gpt, and the job API
// over it (on the same store, clock, poll interval and logger; the
// Observer gets the API's submits too when it counts them); edit tunes the
// config. It is started unless edit sets Owner to "manual".
func newService(t testing.TB, st jobstore.Store, d, gpt Dispatcher, edit func(*Config)) *testService {
	t.Helper()
	if st == nil {
		st = openStore(t)
	}
	if gpt == nil {
		gpt = succeed()
	}
	cfg := Config{
		Store:        st,
		Dispatchers:  map[string]Dispatcher{"claude": d, "gpt": gpt},
		Protocols:    map[string]llm.Protocol{"claude": llm.Anthropic, "gpt": llm.OpenAI},
		PollInterval: 20 * time.Millisecond,
		Owner:        "test",
	}
	if edit != nil {
		edit(&cfg)
	}
	manual := cfg.Owner == "manual"
	s, err := New(cfg)
	require.NoError(t, err)
	apiCfg := jobsapi.Config{Store: cfg.Store, Runtime: s, Protocols: cfg.Protocols, Clock: cfg.Clock,
		MaxAttempts: s.cfg.MaxAttempts, PollInterval: cfg.PollInterval, Logger: cfg.Logger}
	if o, ok := cfg.Observer.(jobsapi.Observer); ok {
		apiCfg.Observer = o
	}
	api, err := jobsapi.New(apiCfg)
	require.NoError(t, err)
	if !manual {
		require.NoError(t, s.Start(context.Background()))
	}
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return &testService{Service: s, api: api}
}

// do sends one request to h and returns the status and body.
func do(t *testing.T, h http.Handler, method, target, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.NewDecoder(bytes.NewReader(b)).Decode(&v), string(b))
	return v
}

// submit posts a job for upstream claude and returns its view.
func submit(t *testing.T, s *testService, extra string) jobsapi.JobView {
	t.Helper()
	code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+extra+`}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	return decode[jobsapi.JobView](t, body)
}

// await long-polls job id until it is finished.
func await(t *testing.T, s *testService, id int64) jobsapi.JobView {
	t.Helper()
	for range 100 {
		code, body := do(t, s.Handler(), "GET", "/v1/jobs/"+formatID(id)+"?wait=5s", "")
		require.Equal(t, http.StatusOK, code, string(body))
		v := decode[jobsapi.JobView](t, body)
		if v.State.Finished() {
			return v
		}
	}
	t.Fatalf("job %d never finished", id)
	return jobsapi.JobView{}
}

// waitFor polls the store until job id is in state want.
func waitFor(t *testing.T, st jobstore.Store, id int64, want jobstore.State) *jobstore.Job {
	t.Helper()
	var j *jobstore.Job
	require.Eventually(t, func() bool {
		var err error
		j, err = st.Get(context.Background(), id)
		return err == nil && j.State == want
	}, 10*time.Second, 5*time.Millisecond, "job %d never reached %s", id, want)
	return j
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

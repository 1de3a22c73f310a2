package jobsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// The API's tests run it over the real job runtime (jobs.Service) with
// fake upstreams, as the gateway serves them: a route's answer often
// depends on what the runtime did with the job.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// fakeDispatcher answers every call with fn and counts the calls.
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

func (f *fakeDispatcher) Do(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.fn(ctx, req)
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

const openAIBody = `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`

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

// config is what a test tunes: the runtime's config, and the API's.
type config struct {
	jobs.Config
	API jobsapi.Config
}

// testService is the job runtime with the API over it.
type testService struct {
	*jobs.Service
	api *jobsapi.API
}

// Handler returns the job API.
func (s *testService) Handler() http.Handler { return s.api }

// newService builds a runtime over a fresh store with upstream "claude"
// (anthropic) served by d and "gpt" (openai) served by gpt, and the API
// over it (on the same store, protocols, clock, poll interval and logger
// unless edit sets the API's own); edit tunes both. The runtime is started
// unless edit sets Owner to "manual".
func newService(t testing.TB, st jobstore.Store, d, gpt jobs.Dispatcher, edit func(*config)) *testService {
	t.Helper()
	if st == nil {
		st = openStore(t)
	}
	if gpt == nil {
		gpt = succeed()
	}
	c := config{Config: jobs.Config{
		Store:        st,
		Dispatchers:  map[string]jobs.Dispatcher{"claude": d, "gpt": gpt},
		Protocols:    map[string]llm.Protocol{"claude": llm.Anthropic, "gpt": llm.OpenAI},
		PollInterval: 20 * time.Millisecond,
		Owner:        "test",
	}}
	if edit != nil {
		edit(&c)
	}
	manual := c.Owner == "manual"
	s, err := jobs.New(c.Config)
	require.NoError(t, err)
	a := c.API
	a.Store, a.Runtime, a.Protocols = c.Store, s, c.Protocols
	a.Clock, a.MaxAttempts = c.Clock, c.Config.WithDefaults().MaxAttempts
	a.PollInterval, a.Logger = cmp(a.PollInterval, c.PollInterval), cmp(a.Logger, c.Logger)
	api, err := jobsapi.New(a)
	require.NoError(t, err)
	if !manual {
		require.NoError(t, s.Start(context.Background()))
	}
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return &testService{Service: s, api: api}
}

// cmp is a unless it is zero, else b.
func cmp[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
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

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

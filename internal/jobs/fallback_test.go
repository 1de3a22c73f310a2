package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// outageDispatcher is a fake engine that can be in an outage: while down
// it is Unavailable, admits nothing at once and holds Acquire until it is
// back (up), as an open breaker holds a job's admission; waiting is
// signalled once an Acquire is held.
type outageDispatcher struct {
	*fakeDispatcher
	down    atomic.Bool
	up      chan struct{}
	waiting chan struct{}
	once    sync.Once
}

func newOutage(d *fakeDispatcher) *outageDispatcher {
	o := &outageDispatcher{fakeDispatcher: d, up: make(chan struct{}), waiting: make(chan struct{})}
	o.down.Store(true)
	return o
}

func (o *outageDispatcher) Unavailable() bool { return o.down.Load() }

// recover ends the outage.
func (o *outageDispatcher) recover() {
	o.down.Store(false)
	close(o.up)
}

func (o *outageDispatcher) Acquire(ctx context.Context, p dispatch.AcquireParams) (*dispatch.Ticket, error) {
	if o.down.Load() {
		o.once.Do(func() { close(o.waiting) })
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-o.up:
		}
	}
	return o.fakeDispatcher.Acquire(ctx, p)
}

func (o *outageDispatcher) TryAcquire(p dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	if o.down.Load() {
		return nil, false
	}
	return o.fakeDispatcher.TryAcquire(p)
}

// modelRecorder answers okMessage and records the model of each call.
func modelRecorder() (*fakeDispatcher, func() []string) {
	var mu sync.Mutex
	var models []string
	d := &fakeDispatcher{fn: func(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		var b struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(req.Body, &b)
		mu.Lock()
		models = append(models, b.Model)
		mu.Unlock()
		return reply(200, okMessage), nil
	}}
	return d, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), models...)
	}
}

// TestJobsFallBackWhileTheirUpstreamIsUnavailable: a job whose upstream
// is in an outage is served by the fallback (its model rewritten, the
// result naming who served it, its idempotency key still finding it),
// unless its class may not fall back: then it waits for its upstream.
func TestJobsFallBackWhileTheirUpstreamIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		priority string
		fallback bool
	}{
		{"allowed class falls back", "critical", true},
		{"other class waits for its upstream", "low", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primaryFake, primaryModels := modelRecorder()
			primary := newOutage(primaryFake)
			backup, backupModels := modelRecorder()
			layer, err := admit.New(admit.Config{Upstreams: []upcfg.Config{
				{Name: "claude", Protocol: llm.Anthropic, FallbackClasses: []string{"critical", "high"},
					Fallbacks: []upcfg.Fallback{{Upstream: "claude-b", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}},
				{Name: "claude-b", Protocol: llm.Anthropic}}})
			require.NoError(t, err)
			layer.Bind(map[string]admit.Engine{"claude": primary, "claude-b": backup})
			s := newService(t, nil, primary, nil, func(c *Config) {
				c.Dispatchers["claude-b"] = backup
				c.Protocols["claude-b"] = llm.Anthropic
				c.Admission = layer
			})
			req := `{"upstream":"claude","priority":"` + tc.priority + `","idempotency_key":"k-` + tc.priority + `","request":` + anthropicBody + `}`
			code, body := do(t, s.Handler(), "POST", "/v1/jobs", req)
			require.Equal(t, http.StatusAccepted, code, string(body))
			id := decode[jobsapi.JobView](t, body).ID
			if !tc.fallback {
				// The job waits for its upstream while it is down...
				<-primary.waiting
				require.Empty(t, backupModels(), "a low job does not fall back")
				require.Empty(t, primaryModels())
				primary.recover() // ...and runs there once it is back.
			}
			v := await(t, s, id)
			require.Equal(t, "succeeded", string(v.State))
			require.Equal(t, "claude", v.Upstream, "the job keeps its upstream")
			if tc.fallback {
				require.Equal(t, []string{"claude-haiku-4-5"}, backupModels(), "the fallback's model")
				require.Empty(t, primaryModels(), "nothing reached the upstream in its outage")
				require.Equal(t, "claude-b", v.Response.Headers[servedByHeader])
			} else {
				require.Equal(t, []string{"claude-sonnet-4-5"}, primaryModels())
				require.Empty(t, backupModels())
				require.Equal(t, "claude", v.Response.Headers[servedByHeader])
			}
			// The idempotency key finds the same job, whoever served it.
			code, body = do(t, s.Handler(), "POST", "/v1/jobs", req)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, id, decode[jobsapi.JobView](t, body).ID)
		})
	}
}

// TestJobHeldByItsClientLimitIsNoAttempt: a client's jobs over its own
// requests_per_minute are held back in the store until its next turn,
// not sent: each succeeds with one attempt and no entry in its history,
// and the log has no rate limit in it.
func TestJobHeldByItsClientLimitIsNoAttempt(t *testing.T) {
	t.Parallel()
	layer, err := admit.New(admit.Config{Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic}},
		Clients: []admit.Client{{Name: "acme", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 120, BurstSeconds: 0.5}}}}})
	require.NoError(t, err)
	d := succeed()
	layer.Bind(map[string]admit.Engine{"claude": d})
	var logs bytes.Buffer
	var mu sync.Mutex
	s := newService(t, nil, d, nil, func(c *Config) {
		c.Admission = layer
		c.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var ids []int64
	for i := range 3 {
		code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","idempotency_key":"k`+strconv.Itoa(i)+`","request":`+anthropicBody+`}`,
			"X-Sluice-Client", "acme")
		require.Equal(t, http.StatusAccepted, code, string(body))
		ids = append(ids, decode[jobsapi.JobView](t, body).ID)
	}
	for _, id := range ids {
		v := await(t, s, id)
		require.Equal(t, "succeeded", string(v.State))
		require.Equal(t, 1, v.Attempts, "the limit burns no attempt")
		require.Empty(t, v.Errors, "nothing in its history")
	}
	// The attempt line is written just after the job's result.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logs.String(), `"msg":"job attempt"`) == 3
	}, 5*time.Second, time.Millisecond, "one attempt line each")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), `"msg":"job held"`, "two of the three were held back")
	require.Contains(t, logs.String(), "client acme's requests_per_minute (120) on claude")
	require.NotContains(t, logs.String(), "rate_limited")
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

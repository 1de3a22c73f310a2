package jobs

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

// outageDispatcher is a fake engine that can be in an outage: while down
// it is Unavailable, admits nothing at once and holds Acquire until it is
// back, as an open breaker holds a job's admission.
type outageDispatcher struct {
	*fakeDispatcher
	down      atomic.Bool
	acquiring atomic.Int64 // Acquire calls made (a job routed here waits in one)
}

func (o *outageDispatcher) Unavailable() bool { return o.down.Load() }

func (o *outageDispatcher) Acquire(ctx context.Context, p dispatch.AcquireParams) (*dispatch.Ticket, error) {
	o.acquiring.Add(1)
	for o.down.Load() {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Millisecond):
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
			primary := &outageDispatcher{fakeDispatcher: primaryFake}
			primary.down.Store(true)
			backup, backupModels := modelRecorder()
			st := &claimCounter{Store: openStore(t)}
			s := newService(t, st, primary, nil, func(c *Config) {
				c.Dispatchers["claude-b"] = backup
				c.Protocols["claude-b"] = llm.Anthropic
				var classes [llm.NumPriorities]bool
				classes[llm.Critical], classes[llm.High] = true, true
				c.Fallbacks = map[string]Fallbacks{"claude": {Classes: classes,
					To: []FallbackTarget{{Upstream: "claude-b", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}}}
			})
			req := `{"upstream":"claude","priority":"` + tc.priority + `","idempotency_key":"k-` + tc.priority + `","request":` + anthropicBody + `}`
			code, body := do(t, s.Handler(), "POST", "/v1/jobs", req)
			require.Equal(t, http.StatusAccepted, code, string(body))
			id := decode[JobView](t, body).ID
			if !tc.fallback {
				// The job waits while its upstream is down: its admission
				// was asked of the upstream (the route is decided before
				// Acquire, and not again while it waits), and several polls
				// pass without another route...
				require.Eventually(t, func() bool { return primary.acquiring.Load() > 0 }, 10*time.Second, time.Millisecond,
					"the low job's admission waits on its upstream")
				st.waitPolls(t, 5)
				require.Empty(t, backupModels(), "a low job does not fall back")
				require.Empty(t, primaryModels())
				primary.down.Store(false) // ...and runs there once it is back.
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
			require.Equal(t, id, decode[JobView](t, body).ID)
		})
	}
}

// TestJobFallbacksValidated: a fallback must name a dispatcher of the same
// protocol.
func TestJobFallbacksValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fb   map[string]Fallbacks
		want string
	}{
		{"unknown upstream", map[string]Fallbacks{"nope": {To: []FallbackTarget{{Upstream: "gpt"}}}}, "Fallbacks[nope]"},
		{"unknown fallback", map[string]Fallbacks{"claude": {To: []FallbackTarget{{Upstream: "nope"}}}}, "Fallbacks[claude].To[0].Upstream"},
		{"other protocol", map[string]Fallbacks{"claude": {To: []FallbackTarget{{Upstream: "gpt"}}}}, "speaks openai"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Config{Store: openStore(t), Dispatchers: map[string]Dispatcher{"claude": succeed(), "gpt": succeed()},
				Protocols: map[string]llm.Protocol{"claude": llm.Anthropic, "gpt": llm.OpenAI}, Fallbacks: tc.fb})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

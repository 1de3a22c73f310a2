package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// statusRig is a gateway on the mock provider with a tight request quota,
// so that requests queue for it.
type statusRig struct {
	g    *Server
	base string
	m    *mock.Server
}

func newStatusRig(t *testing.T, rpm int64, clients []clients.Config) *statusRig {
	t.Helper()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 7})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up",
			Limits: upcfg.Limits{RequestsPerMinute: rpm}}},
		Clients: clients}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	return &statusRig{g: g, base: "http://" + g.Addr(), m: m}
}

// send posts n messages requests in the background; cancel ends them.
func (r *statusRig) send(t *testing.T, n int, key, priority string) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, "POST", r.base+"/claude/v1/messages",
				strings.NewReader(`{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				return
			}
			req.Header.Set("x-api-key", key)
			req.Header.Set("X-Priority", priority)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
	}
	return func() { stop(); wg.Wait() }
}

func (r *statusRig) status(t *testing.T, key string) opsview.StatusResponse {
	t.Helper()
	code, body := call(t, "GET", r.base+"/v1/status", key, "")
	require.Equal(t, http.StatusOK, code, string(body))
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	return st
}

func TestStatusSaysWhyRequestsWait(t *testing.T) {
	t.Parallel()
	r := newStatusRig(t, 6, []clients.Config{{Name: "web", Key: "ck-web"}, {Name: "ops", Key: "ck-ops", Role: "admin"}})
	stop := r.send(t, 6, "ck-web", "low")
	defer stop()
	var st opsview.StatusResponse
	require.Eventually(t, func() bool {
		st = r.status(t, "ck-ops")
		u := st.Upstreams[0]
		return u.Queued["low"] > 0 && u.WaitingOn != nil && u.OldestWait["low"] > 0
	}, 20*time.Second, 20*time.Millisecond)
	u := st.Upstreams[0]
	require.Equal(t, "quota", u.WaitingOn.Reason)
	require.Equal(t, "requests", u.WaitingOn.Dimension)
	require.NotNil(t, u.WaitingOn.Until)
	require.True(t, u.WaitingOn.Until.After(st.Time), "the bucket refills later")
	require.NotNil(t, u.Jobs, "the job queue's counts")
	require.GreaterOrEqual(t, u.OpenRequests, u.Queued["low"], "every queued request is open")
	require.Equal(t, "web", u.Oldest[0].Client)
	require.Equal(t, "low", u.Oldest[0].Priority)
	require.Positive(t, u.Oldest[0].AgeSeconds)
	b := u.Buckets["requests"]
	require.Equal(t, b.Level, float64(int(b.Level*10))/10, "rounded to a tenth of a request")
	require.Equal(t, "closed", u.Breaker)
	require.NotEmpty(t, st.Clients)
	require.Equal(t, "web", st.Clients[0].Client)
	// A client that is not an admin sees no other client's name or usage.
	mine := r.status(t, "ck-web")
	require.Empty(t, mine.Clients)
	require.NotEmpty(t, mine.Upstreams[0].Oldest)
	require.Empty(t, mine.Upstreams[0].Oldest[0].Client)

	require.Regexp(t, `sluice_queue_oldest_wait_seconds\{priority="low",upstream="claude"\} [1-9e.0-9-]+`, scrape(t, r.g.Handler()))
	stop()
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, r.g.Handler()), `client="web"`)
	}, 10*time.Second, 20*time.Millisecond, "the requests counter names the configured client")
}

func TestBreakerControl(t *testing.T) {
	t.Parallel()
	r := newStatusRig(t, 0, []clients.Config{{Name: "ops", Key: "ck-ops", Role: "admin"}, {Name: "web", Key: "ck-web"}})
	tests := []struct {
		key, body string
		code      int
		breaker   string
	}{
		{"", `{"action":"open"}`, http.StatusUnauthorized, "closed"},
		{"ck-web", `{"action":"open"}`, http.StatusForbidden, "closed"},
		{"ck-ops", `{"action":"explode"}`, http.StatusBadRequest, "closed"},
		{"ck-ops", `{"action":"open"}`, http.StatusOK, "open"},
		{"ck-ops", `{"action":"reset"}`, http.StatusOK, "closed"},
	}
	for _, tc := range tests {
		code, body := call(t, "POST", r.base+"/v1/upstreams/claude/breaker", tc.key, tc.body)
		require.Equal(t, tc.code, code, string(body))
		if tc.code != http.StatusOK {
			require.Contains(t, string(body), `"type":"error"`, "errors in the provider's shape")
		}
		require.Equal(t, tc.breaker, r.status(t, "ck-ops").Upstreams[0].Breaker, tc.body)
	}
	code, body := call(t, "POST", r.base+"/v1/upstreams/nope/breaker", "ck-ops", `{"action":"reset"}`)
	require.Equal(t, http.StatusNotFound, code, string(body))
	// The pause routes of the job API still answer beside it.
	code, body = call(t, "POST", r.base+"/v1/upstreams/claude/pause", "ck-ops", "")
	require.Equal(t, http.StatusOK, code, string(body))

	hist := r.status(t, "ck-ops").Upstreams[0].BreakerHistory
	require.Len(t, hist, 2)
	require.Equal(t, opsview.BreakerEventStatus{At: hist[0].At, From: "closed", To: "open", Cause: "operator open"}, hist[0])
	require.Equal(t, "operator reset", hist[1].Cause)
}

func TestBreakerHeldOpenFailsRequestsAtOnce(t *testing.T) {
	t.Parallel()
	r := newStatusRig(t, 0, nil)
	code, body := call(t, "POST", r.base+"/v1/upstreams/claude/breaker", "", `{"action":"open"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", r.base+"/claude/v1/messages", "", `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 529, code, string(body))
	require.Contains(t, string(body), "held open by an operator")
	require.Empty(t, r.m.Stats().Overall.ByStatus, "nothing reached the provider")
}

// TestStatusHistoryRoute: GET /v1/status/history answers the history
// ring (its samples are checked in internal/opsview).
func TestStatusHistoryRoute(t *testing.T) {
	t.Parallel()
	r := newStatusRig(t, 0, nil)
	for range 3 {
		code, body := call(t, "POST", r.base+"/claude/v1/messages", "", `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	code, body := call(t, "GET", r.base+"/v1/status/history", "", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"interval_seconds":2`)
}

// TestMetricNamesFollowConventions lints every metric the gateway
// registers: the families a scrape returns after traffic (promlint: _total
// on counters only, base units, no camelCase), and every sluice_ name in
// the source of this package and of internal/opsview, so a metric that has
// no series yet is checked too.
func TestMetricNamesFollowConventions(t *testing.T) {
	t.Parallel()
	r := newStatusRig(t, 0, []clients.Config{{Name: "web", Key: "ck-web"}})
	code, body := call(t, "POST", r.base+"/claude/v1/messages", "ck-web", `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, code, string(body))
	mfs, err := r.g.registry.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	var ours []promlint.Problem
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "sluice_") {
			ours = append(ours, p)
		}
	}
	require.Empty(t, ours)

	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = mf.GetType().String()
	}
	// The gateway's own metrics and the operator view's (internal/opsview).
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	viewFiles, err := filepath.Glob(filepath.Join("..", "opsview", "*.go"))
	require.NoError(t, err)
	files = append(files, viewFiles...)
	nameRE := regexp.MustCompile(`"(sluice_[a-zA-Z0-9_]*)"`)
	badUnit := regexp.MustCompile(`_(ms|milliseconds|minutes|hours|kb|mb|bytes_total_bytes|percent)(_|$)`)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range nameRE.FindAllStringSubmatch(string(src), -1) {
			name := m[1]
			seen++
			require.Regexp(t, `^sluice_[a-z0-9_]+[a-z0-9]$`, name, "%s: snake_case", f)
			require.NotRegexp(t, badUnit, name, "%s: base units (seconds, bytes)", f)
			if typ, ok := types[name]; ok {
				require.Equal(t, typ == "COUNTER", strings.HasSuffix(name, "_total"), "%s is a %s: _total on counters only", name, typ)
			}
		}
	}
	require.Greater(t, seen, 20, "the source scan found the metrics")
}

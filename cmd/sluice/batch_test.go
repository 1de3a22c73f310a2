package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// countingUpstream answers every request and counts calls per body; after
// stopAfter calls it runs onLimit once (the test's Ctrl-C).
type countingUpstream struct {
	mu        sync.Mutex
	calls     map[string]int
	stopAfter int
	onLimit   func()
}

func (c *countingUpstream) Acquire(context.Context, dispatch.AcquireParams) (*dispatch.Ticket, error) {
	return dispatch.NewTicketFunc(c.Do), nil
}

func (c *countingUpstream) TryAcquire(dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	return dispatch.NewTicketFunc(c.Do), true
}

func (c *countingUpstream) Do(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	c.mu.Lock()
	c.calls[string(req.Body)]++
	n := 0
	for _, v := range c.calls {
		n += v
	}
	if n == c.stopAfter && c.onLimit != nil {
		c.onLimit()
	}
	c.mu.Unlock()
	return &dispatch.Response{Response: &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id":"msg","type":"message","content":[],"usage":{"input_tokens":5,"output_tokens":2}}`))}}, nil
}

// testTimeout bounds every command, request and teardown of these tests, so
// a wedged store or server fails them instead of hanging go test.
const testTimeout = 30 * time.Second

// boundedContext is a context that ends after testTimeout (or with t).
func boundedContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// within runs fn, a step that could block, and fails t when it does not
// return within testTimeout (fn is then left running: the test has failed).
func within(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-timer.C:
		t.Errorf("%s did not finish within %v", what, testTimeout)
	}
}

// jobsGateway serves the job API over a job service on a fresh SQLite store,
// started unless start is false, on an httptest server. Everything is torn
// down in t's cleanup, each step bounded.
func jobsGateway(t *testing.T, up jobs.Dispatcher, start bool) *httptest.Server {
	t.Helper()
	return jobsGatewayWith(t, up, start, nil)
}

// jobsGatewayWith is jobsGateway with the job service's config edited.
func jobsGatewayWith(t *testing.T, up jobs.Dispatcher, start bool, edit func(*jobs.Config)) *httptest.Server {
	t.Helper()
	st, err := jobstore.Open(boundedContext(t), "sqlite:"+filepath.Join(t.TempDir(), "q.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { within(t, "closing the store", st.Close) })
	cfg := jobs.Config{Store: st, Dispatchers: map[string]jobs.Dispatcher{"anthropic": up}, Protocols: map[string]llm.Protocol{"anthropic": llm.Anthropic}}
	if edit != nil {
		edit(&cfg)
	}
	svc, err := jobs.New(cfg)
	require.NoError(t, err)
	if start {
		require.NoError(t, svc.Start(boundedContext(t)))
	}
	t.Cleanup(func() {
		within(t, "stopping the job service", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			return svc.Stop(ctx)
		})
	})
	api, err := jobsapi.New(jobsapi.Config{Store: st, Runtime: svc, Protocols: cfg.Protocols, Clock: cfg.Clock,
		MaxAttempts: cfg.WithDefaults().MaxAttempts, Logger: cfg.Logger})
	require.NoError(t, err)
	srv := httptest.NewServer(api)
	t.Cleanup(func() { within(t, "closing the HTTP server", func() error { srv.Close(); return nil }) })
	return srv
}

func TestBatchRunResumesWithoutResending(t *testing.T) {
	t.Parallel()
	up := &countingUpstream{calls: map[string]int{}, stopAfter: 15}
	srv := jobsGateway(t, up, true)

	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	var b strings.Builder
	const n = 40
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%02d","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o644))

	ctx, cancel := context.WithCancel(boundedContext(t))
	up.mu.Lock()
	up.onLimit = cancel // interrupt mid-run
	up.mu.Unlock()
	var stdout, stderr bytes.Buffer
	code := runMain(ctx, []string{"batch", "run", in, "-o", out, "--server", srv.URL, "--concurrency", "4"}, &stdout, &stderr)
	require.Equal(t, 1, code, stderr.String())
	require.Contains(t, stderr.String(), "run the same command again")
	first, err := os.ReadFile(out)
	require.NoError(t, err)
	partial := strings.Count(string(first), "\n")
	require.Less(t, partial, n, "the first run was interrupted")
	// A torn last line from a crash must be rewritten, not kept.
	require.NoError(t, os.WriteFile(out, append(first, []byte(`{"custom_id":"r3`)...), 0o644))

	stderr.Reset()
	code = runMain(boundedContext(t), []string{"batch", "run", in, "-o", out, "--server", srv.URL}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	final, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(final)), "\n")
	require.Len(t, lines, n)
	seen := map[string]bool{}
	for _, l := range lines {
		require.Contains(t, l, `"type":"succeeded"`)
		id := l[strings.Index(l, `"custom_id":"`)+13:][:3]
		require.False(t, seen[id], "custom_id %s written twice", id)
		seen[id] = true
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	require.Len(t, up.calls, n)
	for body, c := range up.calls {
		require.Equal(t, 1, c, "request sent twice: %s", body)
	}
}

func TestBatchAndJobsCommandErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"custom_id\":\"a\",\"params\":{}}\nnope\n"), 0o644))
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"batch"}, 2, "batch run input.jsonl"},
		{[]string{"batch", "run", bad}, 2, "-o results.jsonl is required"},
		{[]string{"batch", "run", filepath.Join(dir, "missing.jsonl"), "-o", "x"}, 1, "reading input"},
		{[]string{"batch", "run", bad, "-o", filepath.Join(dir, "o")}, 1, "line 2"},
		{[]string{"batch", "run", bad, "-o", "x", "--store", "sqlite:x.db"}, 1, "invalid line"},
		{[]string{"jobs"}, 2, "want ls, get"},
		{[]string{"jobs", "explode"}, 2, "unknown jobs subcommand"},
		{[]string{"jobs", "get"}, 2, "one job id"},
		{[]string{"jobs", "ls", "--server", "ftp://x"}, 2, "--server"},
		{[]string{"jobs", "get", "1", "--server", "http://127.0.0.1:1"}, 1, "calling GET"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		require.Equal(t, tc.code, runMain(context.Background(), tc.args, &stdout, &stderr), "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, tc.args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
	}
}

func TestJobsCommands(t *testing.T) {
	t.Parallel()
	srv := jobsGateway(t, &countingUpstream{calls: map[string]int{}}, false) // not started: jobs stay queued
	for range 3 {
		req, err := http.NewRequestWithContext(boundedContext(t), "POST", srv.URL+"/v1/jobs",
			strings.NewReader(`{"upstream":"anthropic","request":{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 202, resp.StatusCode)
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runMain(boundedContext(t), append(append([]string{"jobs"}, args...), "--server", srv.URL), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// ls lists the newest first, --limit pages on with --cursor in that
	// order; --oldest-first the other way.
	idsOf := func(out string) []string {
		var ids []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] != "more:" {
				ids = append(ids, f[0])
			}
		}
		return ids
	}
	code, out, errOut := run("ls", "--state", "queued")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "queued")
	require.Equal(t, []string{"3", "2", "1"}, idsOf(out))
	code, out, errOut = run("ls", "--limit", "2")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []string{"3", "2"}, idsOf(out))
	require.Contains(t, out, "more: --cursor 2\n")
	code, out, errOut = run("ls", "--limit", "2", "--cursor", "2")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []string{"1"}, idsOf(out))
	require.NotContains(t, out, "more:")
	code, out, errOut = run("ls", "--limit", "2", "--oldest-first")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []string{"1", "2"}, idsOf(out))
	require.Contains(t, out, "more: --cursor 2 --oldest-first\n")
	code, out, _ = run("get", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"state": "queued"`)
	code, out, _ = run("cancel", "1")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"state": "canceled"`)
	code, _, errOut = run("retry", "1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "only dead jobs")
	code, out, _ = run("retry", "--all")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"requeued": 0`)
}

func TestAPIClientCallsAreBounded(t *testing.T) {
	t.Parallel()
	c, err := newAPIClient("http://127.0.0.1:1", "")
	require.NoError(t, err)
	require.Greater(t, c.hc.Timeout, jobsapi.MaxLongPollDefault, "the longest long poll must fit in one call")

	// A gateway that never answers fails the call instead of hanging it.
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-block:
		}
	}))
	defer srv.Close()
	defer close(block)
	c, err = newAPIClient(srv.URL, "")
	require.NoError(t, err)
	c.hc.Timeout = 50 * time.Millisecond
	_, err = c.call(boundedContext(t), "GET", "/v1/jobs/1?wait=30s", nil, nil, nil)
	require.ErrorContains(t, err, "calling GET /v1/jobs/1?wait=30s")
}

// pathUpstream answers every call with an OpenAI body of the endpoint it
// was sent to, recording the paths and endpoints.
type pathUpstream struct {
	mu    sync.Mutex
	paths map[string]int
	eps   map[string]int
}

func (p *pathUpstream) Acquire(context.Context, dispatch.AcquireParams) (*dispatch.Ticket, error) {
	return dispatch.NewTicketFunc(p.Do), nil
}

func (p *pathUpstream) TryAcquire(dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	return dispatch.NewTicketFunc(p.Do), true
}

func (p *pathUpstream) Do(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	p.mu.Lock()
	p.paths[req.Path]++
	p.eps[req.Endpoint.String()]++
	p.mu.Unlock()
	body := `{"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`
	switch req.Path {
	case "/v1/responses":
		body = `{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":5,"output_tokens":2}}`
	case "/v1/embeddings":
		body = `{"object":"list","data":[],"usage":{"prompt_tokens":5,"total_tokens":5}}`
	}
	return &dispatch.Response{Response: &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body))}}, nil
}

// TestBatchRunResponsesAndEmbeddings: `sluice batch run` sends each OpenAI
// line to the endpoint its url names.
func TestBatchRunResponsesAndEmbeddings(t *testing.T) {
	t.Parallel()
	up := &pathUpstream{paths: map[string]int{}, eps: map[string]int{}}
	srv := jobsGatewayWith(t, &countingUpstream{calls: map[string]int{}}, true, func(c *jobs.Config) {
		c.Dispatchers["openai"] = up
		c.Protocols["openai"] = llm.OpenAI
	})
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	lines := `{"custom_id":"r","method":"POST","url":"/v1/responses","body":{"model":"gpt-4.1","max_output_tokens":16,"input":"hi"}}
{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":["a","b"]}}
{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}}
`
	require.NoError(t, os.WriteFile(in, []byte(lines), 0o644))
	var stdout, stderr bytes.Buffer
	code := runMain(boundedContext(t), []string{"batch", "run", in, "-o", out, "--server", srv.URL, "--upstream", "openai"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	res, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(res), `"status_code":200`), string(res))
	require.Contains(t, string(res), `"object":"response"`)
	up.mu.Lock()
	defer up.mu.Unlock()
	require.Equal(t, map[string]int{"/v1/responses": 1, "/v1/embeddings": 1, "/v1/chat/completions": 1}, up.paths)
	require.Equal(t, map[string]int{"responses": 1, "embeddings": 1, "chat": 1}, up.eps)
}

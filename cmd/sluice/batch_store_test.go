package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// TestBatchRunStoreUsesTheWholeConfig: `sluice batch run --store` runs the
// gateway of the config file, so its upstream settings (retry, breaker,
// limits, classes) and its jobs: settings all apply. Against an upstream
// that is permanently overloaded:
//
//   - retry.max_attempts: 1 and breaker.consecutive_failures: 1 with a 1h
//     open_timeout: the provider gets exactly one call, however long the
//     run (the defaults would retry it 4 times, then probe every ~3 s);
//   - jobs.max_attempts: 1: the job of that call is dead at once (the
//     default, 6, would requeue it);
//   - limits.max_concurrency: 1 and the open breaker: the other jobs wait
//     for an admission ticket queued in the store, with no lease, no attempt
//     burnt and nothing in their history (durable mode: a job is running
//     only while its call is in flight).
func TestBatchRunStoreUsesTheWholeConfig(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	}))
	t.Cleanup(up.Close)

	dir := t.TempDir()
	config := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(config, []byte(`
upstreams:
  - name: anthropic
    protocol: anthropic
    base_url: `+up.URL+`
    api_key: sk-upstream
    limits: {max_concurrency: 1}
    retry: {max_attempts: 1}
    breaker: {consecutive_failures: 1, open_timeout: 1h}
jobs:
  max_attempts: 1
`), 0o644))
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	var b strings.Builder
	const n = 3
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o644))
	dsn := "sqlite:" + filepath.Join(dir, "q.db")

	// The run cannot finish (the breaker stays open for an hour): let it
	// work for 3 s, long enough for several retries and probes with the
	// defaults, then interrupt it as Ctrl-C would.
	ctx, cancel := context.WithTimeout(boundedContext(t), 3*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"batch", "run", in, "-o", out, "--store", dsn, "--config", config}, &stdout, &stderr)
	}()
	<-ctx.Done()
	require.EqualValues(t, 1, calls.Load(), "retry.max_attempts and the breaker allow one provider call")
	var code int
	select {
	case code = <-done:
	case <-time.After(testTimeout):
		t.Fatalf("batch run did not stop within %v of its interrupt", testTimeout)
	}
	require.Equal(t, 1, code, stderr.String())
	require.Contains(t, stderr.String(), "stopped after 1/3 results")

	require.EqualValues(t, 1, calls.Load(), "no call after the interrupt either")
	results, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(results), "\n"), "%s", results)
	require.Contains(t, string(results), `"type":"errored"`)

	st, err := jobstore.Open(boundedContext(t), dsn, jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { within(t, "closing the store", st.Close) })
	var dead, waited int
	for id := int64(1); id <= n; id++ {
		j, err := st.Get(boundedContext(t), id)
		require.NoError(t, err)
		switch j.State {
		case jobstore.StateDead:
			dead++
			require.Equal(t, 1, j.MaxAttempts, "jobs.max_attempts")
			require.Equal(t, 1, j.Attempts)
			require.Len(t, j.Errors, 1)
			require.Equal(t, 529, j.Errors[0].Status)
		default:
			require.Equal(t, jobstore.StateQueued, j.State, "job %d: waiting in the store, not held by the dispatcher", id)
			require.Zero(t, j.Attempts, "job %d: waiting burns no attempt", id)
			require.Empty(t, j.Errors, "job %d: nothing was sent for it", id)
			waited++
		}
	}
	require.Equal(t, 1, dead)
	require.Equal(t, n-1, waited)
}

package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/upstream"
)

// The batch-route scenario (issue 26): N jobs with long deadlines on one
// Anthropic upstream, run twice against a fresh mock each: routed to the
// provider's Batch API (the upstream's batch: section) and on the
// synchronous path within the key's quota. Both runs are on one fake
// clock, moved from rest to rest (clock.StepUntil), gateway and mock in
// process (no sockets): the times reported are the mock's time, what the
// provider's processing and quotas cost, not the machine's.

const (
	// batchRouteJobsDefault is the scenario's job count.
	batchRouteJobsDefault = 1000
	// batchRouteProcessing is how long the mock takes to process a batch
	// ("most batches complete within an hour").
	batchRouteProcessing = time.Hour
	// batchRouteDeadline is the jobs' deadline after their submission.
	batchRouteDeadline = 12 * time.Hour
	// batchRouteSettle bounds each wait for the process to come to rest.
	batchRouteSettle = 30 * time.Second
)

// batchRouteLimits are the key's quotas (Anthropic's tier 1 for Sonnet),
// set on the mock and configured on the gateway.
var batchRouteLimits = mock.Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000}

// batchRouteSide is one run's figures.
type batchRouteSide struct {
	name string
	// mockTime is the fake time from the submission to the last job's
	// end; wall the machine's time for the run.
	mockTime, wall time.Duration
	succeeded      int
	providerCalls  int64
	spentUSD       float64
	billedBatchUSD float64
	duplicates     int64
}

func runBatchRoute(ctx context.Context, o Options) (*Result, error) {
	n := batchRouteJobsDefault
	if o.Quick {
		n = 100
	}
	if o.Requests > 0 {
		n = o.Requests
	}
	o.progress("batch-route: %d jobs routed to the provider's Batch API", n)
	routed, err := runBatchRouteSide(ctx, o, n, true)
	if err != nil {
		return nil, err
	}
	o.progress("batch-route: %d jobs on the synchronous path", n)
	direct, err := runBatchRouteSide(ctx, o, n, false)
	if err != nil {
		return nil, err
	}
	r := &Result{Setup: []string{
		fmt.Sprintf("%d low jobs (claude-sonnet-4-5, max_tokens 300, replies of 50 to 300 tokens) submitted at once as one Sluice batch, deadline %v", n, batchRouteDeadline),
		fmt.Sprintf("one key: %d RPM, %d ITPM, %d OTPM (limits configured as the mock's); mock latency 600ms + 15ms a token", batchRouteLimits.RPM, batchRouteLimits.ITPM, batchRouteLimits.OTPM),
		fmt.Sprintf("routed: batch: {route: provider, classes: [low], poll_interval: 1m}; the mock processes a batch in %v and bills it at half price", batchRouteProcessing),
		"times are mock time: gateway and mock share a fake clock moved from rest to rest, in process; wall is this machine's time for the run",
	}}
	row := func(s batchRouteSide) []string {
		return []string{s.name, fmt.Sprint(s.succeeded), s.mockTime.Round(time.Second).String(), secs(s.wall), fmt.Sprint(s.providerCalls),
			fmt.Sprintf("$%.4f", s.spentUSD), fmt.Sprint(s.duplicates)}
	}
	r.Tables = append(r.Tables, Table{Header: []string{"path", "succeeded", "mock time", "wall", "provider calls", "cost", "duplicates"},
		Rows: [][]string{row(routed), row(direct)}})
	for _, s := range []batchRouteSide{routed, direct} {
		r.figure(s.name+"_mock_time_s", s.mockTime.Seconds())
		r.figure(s.name+"_provider_calls", float64(s.providerCalls))
		r.figure(s.name+"_cost_usd", s.spentUSD)
		r.figure(s.name+"_duplicates", float64(s.duplicates))
	}
	saved := direct.spentUSD - routed.spentUSD
	r.figure("saved_usd", saved)
	r.check("every job succeeded, both paths", fmt.Sprintf("%d and %d", n, n), fmt.Sprintf("%d and %d", routed.succeeded, direct.succeeded),
		routed.succeeded == n && direct.succeeded == n)
	r.check("duplicates", "0", fmt.Sprint(routed.duplicates+direct.duplicates), routed.duplicates == 0 && direct.duplicates == 0)
	r.check("routed spend = the provider's batch bill", fmt.Sprintf("$%.4f", routed.billedBatchUSD), fmt.Sprintf("$%.4f", routed.spentUSD),
		fmt.Sprintf("%.4f", routed.billedBatchUSD) == fmt.Sprintf("%.4f", routed.spentUSD))
	r.check("routed cost", "half the synchronous cost or less", fmt.Sprintf("$%.4f vs $%.4f", routed.spentUSD, direct.spentUSD),
		routed.spentUSD > 0 && routed.spentUSD <= direct.spentUSD/2+1e-9)
	r.Notes = append(r.Notes, fmt.Sprintf("routing saved $%.4f (%.0f%%); the routed jobs waited for the batch (%v of processing), which their deadline allowed",
		saved, 100*saved/max(direct.spentUSD, 1e-12), batchRouteProcessing))
	return r, nil
}

// countingTransport serves requests with a handler in process, counting them.
type countingTransport struct {
	h     http.Handler
	calls atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// runBatchRouteSide runs n jobs through a fresh gateway and mock on a fake
// clock, routed to the Batch API or not.
func runBatchRouteSide(ctx context.Context, o Options, n int, routed bool) (s batchRouteSide, err error) {
	s.name = "synchronous"
	if routed {
		s.name = "routed"
	}
	// The goroutines that stay in the kernel for good (the CLI's signal
	// loop), counted before anything of the run starts.
	outside := clock.OutsideGo()
	t0 := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	m, err := mock.New(mock.Config{Clock: fc, Seed: o.Seed, Limits: batchRouteLimits, TTFT: 600 * time.Millisecond, PerToken: 15 * time.Millisecond,
		OutputTokens: mock.OutputRange{Min: 50, Max: 300},
		Batch:        mock.BatchConfig{Processing: batchRouteProcessing, Prices: map[string]mock.BatchPrice{"claude-sonnet-4-5": {Input: 3, Output: 15}}}})
	if err != nil {
		return s, fmt.Errorf("creating mock: %w", err)
	}
	dir, err := os.MkdirTemp("", "sluice-batch-route-")
	if err != nil {
		return s, fmt.Errorf("making the store directory: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	up := upstream.Config{Name: anthropicUpstream, Protocol: llm.Anthropic, BaseURL: "http://mock.invalid", APIKey: anthropicKey,
		Limits: upstream.Limits{RequestsPerMinute: batchRouteLimits.RPM, InputTokensPerMinute: batchRouteLimits.ITPM, OutputTokensPerMinute: batchRouteLimits.OTPM}}
	if routed {
		up.Batch = upstream.BatchRoute{Route: upstream.BatchRouteProvider, Classes: []string{"low"}, PollInterval: time.Minute}
	}
	rt := &countingTransport{h: m.Handler()}
	gw, err := server.New(server.Config{Store: "sqlite:" + filepath.Join(dir, "sluice.db"), ShutdownGrace: stopTimeout, Upstreams: []upstream.Config{up}},
		server.WithClock(fc), server.WithTransport(rt), server.WithoutListener(), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return s, fmt.Errorf("creating gateway: %w", err)
	}
	if err := gw.Start(ctx); err != nil {
		return s, fmt.Errorf("starting gateway: %w", err)
	}
	defer func() { err = errors.Join(err, gw.Stop(context.WithoutCancel(ctx))) }()

	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, `{"custom_id":"job-%05d","params":{"model":"claude-sonnet-4-5","max_tokens":300,"messages":[{"role":"user","content":"question %d of the nightly run"}]}}`+"\n", i, i)
	}
	start, wallStart := fc.Now(), o.Clock.Now() // the mock's time, and the run's (the wall clock by default)
	code, body := serveLocal(gw.Handler(), http.MethodPost, fmt.Sprintf("/v1/batches?upstream=%s&priority=low&deadline=%s",
		anthropicUpstream, start.Add(batchRouteDeadline).Format(time.RFC3339)), lines.String())
	if code != http.StatusOK {
		return s, fmt.Errorf("submitting the jobs: %d %s", code, body)
	}
	var batch struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &batch); err != nil {
		return s, fmt.Errorf("reading the batch: %w", err)
	}
	var counts struct {
		ProcessingStatus string `json:"processing_status"`
		Counts           struct {
			Succeeded int `json:"succeeded"`
			Dead      int `json:"dead"`
		} `json:"counts"`
	}
	var readErr error
	done := func() bool {
		code, body := serveLocal(gw.Handler(), http.MethodGet, "/v1/batches/"+batch.ID, "")
		if code != http.StatusOK {
			readErr = fmt.Errorf("reading the batch: %d %s", code, body)
			return true
		}
		if err := json.Unmarshal(body, &counts); err != nil {
			readErr = fmt.Errorf("reading the batch: %w", err)
			return true
		}
		return counts.ProcessingStatus == "ended"
	}
	if err := fc.StepUntilAbove(done, outside, batchRouteSettle); err != nil {
		return s, fmt.Errorf("running the jobs: %w", err)
	}
	if readErr != nil {
		return s, readErr
	}
	s.mockTime, s.wall = fc.Now().Sub(start), o.Clock.Now().Sub(wallStart)
	s.succeeded = counts.Counts.Succeeded
	s.providerCalls = rt.calls.Load()
	st := m.Stats().Overall
	s.billedBatchUSD = st.Batch.CostUSD
	s.duplicates = st.Admitted.Requests + st.Batch.Lines["succeeded"] - int64(s.succeeded)
	code, body = serveLocal(gw.Handler(), http.MethodGet, "/v1/status", "")
	if code != http.StatusOK {
		return s, fmt.Errorf("reading the status: %d %s", code, body)
	}
	var status struct {
		Spend struct {
			Clients []struct {
				Total struct {
					SpentUSD float64 `json:"spent_usd"`
				} `json:"total"`
			} `json:"clients"`
		} `json:"spend"`
	}
	if err := json.Unmarshal(body, &status); err != nil {
		return s, fmt.Errorf("reading the status: %w", err)
	}
	for _, c := range status.Spend.Clients {
		s.spentUSD += c.Total.SpentUSD
	}
	return s, nil
}

// serveLocal sends one request to h in process.
func serveLocal(h http.Handler, method, target, body string) (int, []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

package jobs

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// groupCounter counts the provider batches a router submitted.
type groupCounter struct {
	NopObserver
	mu        sync.Mutex
	submitted int
}

func (g *groupCounter) BatchGroup(_ string, e BatchGroupEvent, _ int) {
	if e == BatchGroupSubmitted {
		g.mu.Lock()
		g.submitted++
		g.mu.Unlock()
	}
}

func (g *groupCounter) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.submitted
}

// accountingNode is one process of the accounting test: a job service on
// its own handle of the store file, routing claude's low jobs to the
// mock's Batch API over HTTP with its own client, pricing with its own
// admission layer.
func accountingNode(t *testing.T, dsn, mockURL, owner string, clk *clock.Fake, route upstream.BatchRoute, obs *groupCounter) (*testService, jobstore.Store) {
	t.Helper()
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	api, err := NewBatchAPI(BatchAPIConfig{Upstream: upstream.Config{Name: "claude", Protocol: llm.Anthropic, BaseURL: mockURL, APIKey: "sk"},
		Clock: clk})
	require.NoError(t, err)
	layer, err := admit.New(admit.Config{Clock: clk})
	require.NoError(t, err)
	s := newService(t, st, succeed(), nil, func(c *Config) {
		c.Clock, c.Owner, c.Observer = clk, "manual", obs
		c.LeaseFor = time.Hour
		c.BatchRoutes = map[string]upstream.BatchRoute{"claude": route}
		c.BatchAPIs = map[string]BatchAPI{"claude": api}
		c.BatchPricer = layer
	})
	s.cfg.Owner = owner
	return s, st
}

// TestBatchRouteAccountingAcrossRestart (issue 26): 1,000 routed jobs of
// varied prompts and answers against the mock's Batch API over HTTP, in
// provider batches of at most 300 lines, polled every minute. Clients
// cancel five jobs while their batch runs (the provider bills their lines
// all the same). The gateway dies mid-batch: a second process, on its own
// handle of the store file, takes the groups over once their leases end,
// and the dead one's router, come back with its old tokens, can write
// nothing. A group whose earliest deadline comes near is canceled at the
// provider (its unfinished lines come back canceled, and their jobs with
// a deadline run on the synchronous path, those without one are routed
// again). Every job ends once, and the spend the store recorded equals the
// usage the provider reported for its succeeded lines priced at the batch
// price (here, from the list price), to the cent, and the provider's own
// bill to the nano-dollar: canceled lines cost nothing, and no line is
// charged twice. (Before: identical usage on every line, an
// in-process second router, and no line ever canceled at the provider.)
func TestBatchRouteAccountingAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	const inPrice, outPrice = 3.0, 15.0 // claude-sonnet-4-5's list price, $ per million tokens
	m, err := mock.New(mock.Config{Clock: clk, Seed: 11, OutputTokens: mock.OutputRange{Min: 5, Max: 60},
		Batch: mock.BatchConfig{Processing: 3 * time.Hour,
			Prices: map[string]mock.BatchPrice{"claude-sonnet-4-5": {Input: inPrice, Output: outPrice}}}})
	require.NoError(t, err)
	hs := httptest.NewServer(m.Handler())
	t.Cleanup(hs.Close)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	// Jobs with a deadline are routed while 4 hours are left, and pulled
	// back 3 hours before it.
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MaxRequests: 300, MinGroup: 100, PollInterval: time.Minute,
		MinTimeLeft: 4 * time.Hour, DeadlineMargin: 3 * time.Hour}
	obsA, obsB := &groupCounter{}, &groupCounter{}
	a, st := accountingNode(t, dsn, hs.URL, "node-a", clk, route, obsA)
	var jobs []*jobstore.Job
	deadline := batchT0.Add(5 * time.Hour)
	for i := range 1000 {
		dl := time.Time{}
		if i >= 950 {
			dl = deadline // the last group's: pulled back at 2h
		}
		body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"question %d:%s"}]}`,
			i, strings.Repeat(" and more", i%23))
		r, err := st.Insert(ctx, jobstore.InsertParams{Upstream: "claude", Priority: llm.Low, Client: "acme", Path: "/v1/messages",
			Body: []byte(body), Deadline: dl, MaxAttempts: 3, Now: clk.Now()})
		require.NoError(t, err)
		jobs = append(jobs, r.Job)
	}
	a.routers[0].turn(ctx)
	require.Equal(t, 4, obsA.count(), "1,000 jobs in batches of at most 300")
	for _, j := range jobs[:5] {
		_, err := a.Cancel(ctx, j.ID)
		require.NoError(t, err)
	}
	for range 30 { // polls while the batches run change nothing
		clk.Advance(time.Minute)
		a.routers[0].turn(ctx)
	}
	nanos, _ := spendNanos(t, st)
	require.Zero(t, nanos)

	// Node a dies. Node b starts on the file and takes the groups over
	// once their leases end; a, come back, can write nothing; b polls on
	// and pulls the deadline group back at 2h.
	b, stB := accountingNode(t, dsn, hs.URL, "node-b", clk, route, obsB)
	for clk.Now().Before(batchT0.Add(2*time.Hour + 5*time.Minute)) {
		clk.Advance(time.Minute)
		b.routers[0].turn(ctx)
		if clk.Now().Equal(batchT0.Add(time.Hour)) {
			a.routers[0].turn(ctx)
		}
	}
	require.Zero(t, obsB.count(), "the groups taken over are polled, not sent again")
	stats := m.Stats().Overall.Batch
	require.Positive(t, stats.Lines["canceled"], "the deadline group was canceled at the provider")
	queuedWithDeadline := 0
	for _, j := range jobs[950:] {
		got, err := stB.Get(ctx, j.ID)
		require.NoError(t, err)
		if got.State == jobstore.StateQueued {
			queuedWithDeadline++
			require.Zero(t, got.Attempts, "a canceled line costs no attempt")
		}
	}
	require.Positive(t, queuedWithDeadline, "the deadline jobs whose lines were canceled wait for the synchronous path")

	// From now on b runs as a gateway does: its worker takes the jobs too
	// near their deadline at once; the router routes the lines that came
	// back canceled again until every job is answered.
	require.NoError(t, b.Start(ctx))
	require.Eventually(t, func() bool {
		n := 0
		for _, j := range jobs[950:] {
			got, err := stB.Get(ctx, j.ID)
			require.NoError(t, err)
			if got.State == jobstore.StateSucceeded {
				n++
			}
		}
		return n == 50
	}, time.Minute, 10*time.Millisecond, "the deadline jobs, synchronously, before the clock moves on")
	done := assert.Eventually(t, func() bool {
		clk.Advance(5 * time.Minute)
		page, err := stB.List(ctx, jobstore.ListParams{State: jobstore.StateSucceeded, Limit: 1000})
		require.NoError(t, err)
		return len(page.Jobs) == len(jobs)-5
	}, 2*time.Minute, 10*time.Millisecond)
	if !done {
		states := map[jobstore.State]int{}
		var sample []string
		for _, j := range jobs {
			got, _ := stB.Get(ctx, j.ID)
			states[got.State]++
			if got.State != jobstore.StateSucceeded && got.State != jobstore.StateCanceled && len(sample) < 5 {
				sample = append(sample, fmt.Sprintf("%d %s avail=%v dl=%v errs=%v owner=%s", got.ID, got.State, got.AvailableAt, got.Deadline, got.Errors, got.Lease.Owner))
			}
		}
		t.Fatalf("now=%v states=%v sample=%v mock=%+v", clk.Now(), states, sample, m.Stats().Overall.Batch)
	}
	require.NoError(t, b.Stop(ctx))

	stats = m.Stats().Overall.Batch
	require.Equal(t, int64(obsA.count()+obsB.count()), stats.Batches, "each group sent once")
	routed, syncRun := 0, 0
	for i, j := range jobs {
		got, err := stB.Get(ctx, j.ID)
		require.NoError(t, err)
		if i < 5 {
			require.Equal(t, jobstore.StateCanceled, got.State)
			continue
		}
		require.Equal(t, jobstore.StateSucceeded, got.State, "job %d", j.ID)
		require.Equal(t, 1, got.Attempts, "job %d answered once", j.ID)
		if got.Result.Header.Get(BatchHeader) == "provider" {
			routed++
		} else {
			syncRun++
		}
	}
	require.Equal(t, 995, routed+syncRun)
	require.Positive(t, syncRun)

	nanos, requests := spendNanos(t, stB)
	require.Equal(t, stats.Lines["succeeded"], requests, "each line the provider billed charged once")
	require.Equal(t, stats.CostNanos, nanos, "the provider's bill, to the nano-dollar")
	reported := (float64(stats.InputTokens)*inPrice + float64(stats.OutputTokens)*outPrice) / 1e6 * 0.5
	cents := func(usd float64) float64 { return math.Round(usd * 100) }
	require.Equal(t, cents(reported), cents(float64(nanos)/1e9), "the reported usage at batch prices, to the cent")
	require.Positive(t, reported)
	t.Logf("accounting: %d lines billed, %d canceled at the provider, %d batches, $%.6f recorded, $%.6f reported",
		stats.Lines["succeeded"], stats.Lines["canceled"], stats.Batches, float64(nanos)/1e9, reported)
}

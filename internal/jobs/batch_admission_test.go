package jobs

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/upstream"
)

// TestBatchRouteErroredLineEndsAtMaxAttempts: a line the provider's Batch
// API answers with an error worth retrying (a 5xx, a 429) costs its job
// an attempt, as a synchronous call the provider failed does: a job
// without a deadline is sent again after its backoff, and dies with the
// provider's answer at its max_attempts instead of going round provider
// batches for ever. (Before: released with no attempt counted, sent again
// in every round.)
func TestBatchRouteErroredLineEndsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(batchT0)
			st := openStore(t)
			api := newFakeBatchAPI(clk, 10*time.Minute)
			api.errStatus = status
			route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 1, PollInterval: time.Minute}
			j := insertLow(t, st, clk.Now(), time.Time{}) // 3 attempts
			sync := succeed()
			s := routedService(t, st, clk, api, "node", route, sync)
			got := routeUntilFinished(t, s, st, clk, j.ID)
			require.Equal(t, jobstore.StateDead, got.State, "ends instead of cycling")
			require.Equal(t, 3, got.Attempts)
			require.Equal(t, 3, api.createCount(), "one provider batch per attempt")
			require.Len(t, got.Errors, 3)
			for i, e := range got.Errors {
				require.Equal(t, status, e.Status)
				require.Equal(t, i+1, e.Attempt)
			}
			require.NotNil(t, got.Result)
			require.Equal(t, status, got.Result.Status, "dies with the provider's answer")
			require.Zero(t, sync.Calls())
			nanos, _ := spendNanos(t, st)
			require.Zero(t, nanos, "an errored line is not billed")
		})
	}
}

// TestBatchRouteExpiredLineEndsAtMaxAttempts: a line the provider lets
// expire unprocessed is not billed, but costs its job an attempt, so a job
// without a deadline that the provider keeps expiring ends at its
// max_attempts instead of going round provider batches for ever.
func TestBatchRouteExpiredLineEndsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	api := newFakeBatchAPI(clk, 10*time.Minute)
	api.expire = true
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 1, PollInterval: time.Minute}
	j := insertLow(t, st, clk.Now(), time.Time{}) // 3 attempts
	sync := succeed()
	s := routedService(t, st, clk, api, "node", route, sync)
	got := routeUntilFinished(t, s, st, clk, j.ID)
	require.Equal(t, jobstore.StateDead, got.State, "ends instead of cycling")
	require.Equal(t, 3, got.Attempts)
	require.Equal(t, 3, api.createCount(), "one provider batch per attempt")
	for _, e := range got.Errors {
		require.Contains(t, e.Message, "expire")
		require.Equal(t, "claude", e.Upstream)
	}
	require.Zero(t, sync.Calls())
	nanos, _ := spendNanos(t, st)
	require.Zero(t, nanos, "an expired line is not billed")
}

// routeUntilFinished turns s's router a minute of clk apart until job id
// has finished (at most 200 turns) and returns it.
func routeUntilFinished(t *testing.T, s *testService, st jobstore.Store, clk *clock.Fake, id int64) *jobstore.Job {
	t.Helper()
	var got *jobstore.Job
	for range 200 {
		s.routers[0].turn(context.Background())
		var err error
		got, err = st.Get(context.Background(), id)
		require.NoError(t, err)
		if got.State.Finished() {
			break
		}
		clk.Advance(time.Minute)
	}
	return got
}

// budgetCheckedAPI is a fake Batch API that checks, at each create, that
// the client's budget holds every line in flight: what is spent plus the
// worst cases reserved (this batch's lines included) within the limit.
type budgetCheckedAPI struct {
	*fakeBatchAPI
	t       *testing.T
	layer   func() *admit.Layer
	client  string
	limit   pricing.Amount
	sentFor map[string]int // lines sent per client (the custom_id's job's client)
	st      jobstore.Store
}

func (b *budgetCheckedAPI) Create(ctx context.Context, tag string, lines []BatchLine) (ProviderBatch, error) {
	acct := b.layer().Account(b.client, b.clk.Now())
	require.LessOrEqual(b.t, acct.Day.Spent+acct.Day.Reserved, b.limit, "a create beyond the budget")
	for _, l := range lines {
		id, err := strconv.ParseInt(strings.TrimPrefix(l.CustomID, "job_"), 10, 64)
		require.NoError(b.t, err)
		j, err := b.st.Get(ctx, id)
		require.NoError(b.t, err)
		b.sentFor[j.Client]++
	}
	return b.fakeBatchAPI.Create(ctx, tag, lines)
}

func insertLowFor(t *testing.T, st jobstore.Store, client string, now time.Time) *jobstore.Job {
	t.Helper()
	r, err := st.Insert(context.Background(), jobstore.InsertParams{Upstream: "claude", Priority: llm.Low, Client: client,
		Path: "/v1/messages", Body: []byte(anthropicBody), MaxAttempts: 3, Now: now})
	require.NoError(t, err)
	return r.Job
}

// TestBatchRouteBudget: the budget rule of every door holds for jobs
// routed to the provider's Batch API: a line is admitted before its batch
// is sent, holding its worst case at the batch price while the batch
// runs, so a client's lines in flight never exceed what its budget can
// pay; the jobs that do not fit wait in the queue (no attempt burnt, the
// refusal in their history) and go in a later batch once the spend is
// settled; a job its budget can never hold dies unsent with the refusal;
// a router that takes a group over (the node that sent it died) holds its
// lines again before it admits more. (Before: every queued job was sent,
// and the spend counted only at write-back.)
func TestBatchRouteBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	newLayer := func() *admit.Layer {
		l, err := admit.New(admit.Config{Clock: clk})
		require.NoError(t, err)
		return l
	}
	// A line's worst case at the batch price, as the layer prices it.
	probe := newLayer()
	req, rerr := jobRequest(llm.Anthropic, &jobstore.Job{ID: 1, Path: "/v1/messages", Body: []byte(anthropicBody), Priority: llm.Low}, clk.Now())
	require.Nil(t, rerr)
	h, err := probe.ReserveBatchLine(admit.Target{Upstream: "claude", Protocol: llm.Anthropic}, req)
	require.NoError(t, err)
	worst := h.Amount()
	require.Positive(t, worst)
	limit := worst*3 + worst/2 // three lines in flight at a time
	clients := []admit.Client{{Name: "acme", Budget: admit.Budget{Day: limit.Dollars()}},
		{Name: "tiny", Budget: admit.Budget{Day: (worst / 2).Dollars()}}}
	layerA, layerB := newLayer(), newLayer()
	layerA.SetClients(clients)
	layerB.SetClients(clients)
	current := layerA

	fake := newFakeBatchAPI(clk, time.Hour)
	fake.usage = &llm.Usage{InputTokens: 2, OutputTokens: 1} // well within a line's worst case
	api := &budgetCheckedAPI{fakeBatchAPI: fake, t: t, layer: func() *admit.Layer { return current }, client: "acme", limit: limit,
		sentFor: map[string]int{}, st: st}
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 1, PollInterval: time.Minute}
	var acme []*jobstore.Job
	for range 10 {
		acme = append(acme, insertLowFor(t, st, "acme", clk.Now()))
	}
	tiny := insertLowFor(t, st, "tiny", clk.Now())
	a := routedServiceOn(t, st, clk, api, "node-a", route, nil, layerA)
	a.routers[0].turn(ctx)

	require.Equal(t, 1, api.createCount())
	require.Equal(t, map[string]int{"acme": 3}, api.sentFor, "three of acme's lines fit its budget; tiny's none")
	require.Equal(t, worst*3, layerA.Account("acme", clk.Now()).Day.Reserved)
	got, err := st.Get(ctx, tiny.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateDead, got.State, "a line its budget can never hold dies unsent")
	require.Equal(t, http.StatusBadRequest, got.Errors[0].Status)
	require.Equal(t, "budget", got.Errors[0].Kind)
	held := 0
	for _, j := range acme {
		got, err := st.Get(ctx, j.ID)
		require.NoError(t, err)
		if got.State != jobstore.StateQueued {
			continue
		}
		held++
		require.Zero(t, got.Attempts)
		require.Len(t, got.Errors, 1)
		require.Equal(t, "budget", got.Errors[0].Kind)
		require.Equal(t, http.StatusTooManyRequests, got.Errors[0].Status)
	}
	require.Equal(t, 7, held)

	// Node a dies; node b takes its group over once its lease ends, and
	// holds its lines before it admits more: none of the seven fits.
	clk.Advance(4 * time.Minute)
	current = layerB
	b := routedServiceOn(t, st, clk, api, "node-b", route, nil, layerB)
	b.routers[0].turn(ctx)
	require.Equal(t, 1, api.createCount(), "the lines in flight hold the budget on the node that took them over")
	require.Equal(t, worst*3, layerB.Account("acme", clk.Now()).Day.Reserved)

	// The batch ends and is charged what the provider billed; the seven go
	// in later batches as the budget allows.
	for range 600 {
		clk.Advance(time.Minute)
		b.routers[0].turn(ctx)
		page, err := st.List(ctx, jobstore.ListParams{State: jobstore.StateSucceeded, Limit: 100})
		require.NoError(t, err)
		if len(page.Jobs) == len(acme) {
			break
		}
	}
	for _, j := range acme {
		got, err := st.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, got.State, "job %d", j.ID)
	}
	require.Equal(t, 10, api.sentFor["acme"], "each line sent once")
	require.Greater(t, api.createCount(), 2, "later batches, as the budget allowed")
	acct := layerB.Account("acme", clk.Now())
	require.Zero(t, acct.Day.Reserved, "every hold settled")
	nanos, _ := spendNanos(t, st)
	require.Equal(t, int64(acct.Day.Spent), nanos, "the ledger counts what the store was charged")
	require.LessOrEqual(t, pricing.Amount(nanos), limit)
}

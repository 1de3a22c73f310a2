package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

// fakeBatchAPI is a provider's Batch API on the fake clock: a batch ends
// processing after its processing time; canceled before that, its lines
// end canceled. It bills each line that succeeded once, however often
// its results are read.
type fakeBatchAPI struct {
	clk        *clock.Fake
	processing time.Duration

	mu      sync.Mutex
	batches map[string]*fakeBatch
	creates int
	// loseAnswer makes the next Create reach the provider but fail on
	// the way back.
	loseAnswer bool
	// queueLimit refuses a batch of more lines (ErrBatchQueueFull).
	queueLimit int
	// refuse, when set, is what the next Create answers (once).
	refuse error
	// attempts counts every Create, refused ones included.
	attempts int
	// errStatus, when set, answers every line errored with it.
	errStatus int
	// expire, when set, answers every line expired (the provider's window
	// ran out before it was processed).
	expire bool
	// usage, when set, is what each line bills instead of lineUsage.
	usage *llm.Usage
}

type fakeBatch struct {
	id, tag  string
	lines    []BatchLine
	created  time.Time
	canceled time.Time
}

// lineUsage is what every line of the fake bills.
var lineUsage = llm.Usage{InputTokens: 1000, OutputTokens: 500}

func newFakeBatchAPI(clk *clock.Fake, processing time.Duration) *fakeBatchAPI {
	return &fakeBatchAPI{clk: clk, processing: processing, batches: map[string]*fakeBatch{}}
}

func (f *fakeBatchAPI) Create(_ context.Context, tag string, lines []BatchLine) (ProviderBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if err := f.refuse; err != nil {
		f.refuse = nil
		return ProviderBatch{}, err
	}
	if f.queueLimit > 0 && len(lines) > f.queueLimit {
		return ProviderBatch{}, ErrBatchQueueFull
	}
	f.creates++
	b := &fakeBatch{id: fmt.Sprintf("msgbatch_%d", f.creates), tag: tag, lines: lines, created: f.clk.Now()}
	f.batches[b.id] = b
	if f.loseAnswer {
		f.loseAnswer = false
		return ProviderBatch{}, errors.New("connection reset")
	}
	return ProviderBatch{ID: b.id, CreatedAt: b.created}, nil
}

func (f *fakeBatchAPI) ended(b *fakeBatch) bool {
	return !b.canceled.IsZero() || !f.clk.Now().Before(b.created.Add(f.processing))
}

func (f *fakeBatchAPI) Get(_ context.Context, id string) (ProviderBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches[id]
	if b == nil {
		return ProviderBatch{}, ErrBatchNotFound
	}
	return ProviderBatch{ID: id, Ended: f.ended(b), CreatedAt: b.created}, nil
}

func (f *fakeBatchAPI) Results(_ context.Context, id string) ([]BatchLineResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches[id]
	if b == nil || !f.ended(b) {
		return nil, ErrBatchNotFound
	}
	out := make([]BatchLineResult, len(b.lines))
	usage := lineUsage
	if f.usage != nil {
		usage = *f.usage
	}
	for i, l := range b.lines {
		switch {
		case !b.canceled.IsZero():
			out[i] = BatchLineResult{CustomID: l.CustomID, Outcome: LineCanceled}
		case f.expire:
			out[i] = BatchLineResult{CustomID: l.CustomID, Outcome: LineExpired}
		case f.errStatus != 0:
			out[i] = BatchLineResult{CustomID: l.CustomID, Outcome: LineErrored, Status: f.errStatus,
				Body: []byte(`{"type":"error","error":{"type":"api_error","message":"internal error"}}`)}
		default:
			out[i] = BatchLineResult{CustomID: l.CustomID, Outcome: LineSucceeded, Status: 200, Body: []byte(okMessage), Usage: usage}
		}
	}
	return out, nil
}

func (f *fakeBatchAPI) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.batches[id]
	if b == nil {
		return ErrBatchNotFound
	}
	if !f.ended(b) {
		b.canceled = f.clk.Now()
	}
	return nil
}

func (f *fakeBatchAPI) Find(_ context.Context, q BatchQuery) (ProviderBatch, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.batches {
		if b.tag == q.Tag {
			return ProviderBatch{ID: b.id, Ended: f.ended(b), CreatedAt: b.created}, true, nil
		}
	}
	return ProviderBatch{}, false, nil
}

// billedLines counts the lines the fake billed (succeeded).
func (f *fakeBatchAPI) billedLines() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, b := range f.batches {
		if b.canceled.IsZero() && f.ended(b) {
			n += len(b.lines)
		}
	}
	return n
}

func (f *fakeBatchAPI) createCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

var batchT0 = time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)

// routedService is a service (not started: tests turn its router by
// hand) whose upstream "claude" routes low jobs to api, pricing with a
// fresh admission layer.
func routedService(t *testing.T, st jobstore.Store, clk *clock.Fake, api BatchAPI, owner string, route upstream.BatchRoute, d Dispatcher) *testService {
	t.Helper()
	layer, err := admit.New(admit.Config{Clock: clk})
	require.NoError(t, err)
	return routedServiceOn(t, st, clk, api, owner, route, d, layer)
}

// routedServiceOn is routedService admitting and pricing with layer.
func routedServiceOn(t *testing.T, st jobstore.Store, clk *clock.Fake, api BatchAPI, owner string, route upstream.BatchRoute, d Dispatcher,
	layer *admit.Layer) *testService {
	t.Helper()
	if d == nil {
		d = succeed()
	}
	s := newService(t, st, d, nil, func(c *Config) {
		c.Clock, c.Owner = clk, "manual"
		c.LeaseFor = time.Hour
		c.BatchRoutes = map[string]upstream.BatchRoute{"claude": route}
		c.BatchAPIs = map[string]BatchAPI{"claude": api}
		c.BatchPricer = layer
	})
	s.cfg.Owner = owner
	return s
}

func insertLow(t *testing.T, st jobstore.Store, now time.Time, deadline time.Time) *jobstore.Job {
	t.Helper()
	r, err := st.Insert(context.Background(), jobstore.InsertParams{Upstream: "claude", Priority: llm.Low, Client: "acme",
		Path: "/v1/messages", Body: []byte(anthropicBody), Deadline: deadline, MaxAttempts: 3, Now: now})
	require.NoError(t, err)
	return r.Job
}

func spendNanos(t *testing.T, st jobstore.Store) (nanos, requests int64) {
	t.Helper()
	rows, err := st.Spend(context.Background(), jobstore.SpendParams{})
	require.NoError(t, err)
	for _, r := range rows {
		nanos += r.Nanos
		requests += r.Requests
	}
	return nanos, requests
}

// TestBatchRoutePullBack: a job whose deadline would pass while its
// provider batch runs is canceled there and run on the synchronous path,
// in time, and its canceled line costs nothing.
func TestBatchRoutePullBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	api := newFakeBatchAPI(clk, 20*time.Hour) // a slow provider
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 1, PollInterval: time.Minute}
	deadline := batchT0.Add(3 * time.Hour)
	j := insertLow(t, st, clk.Now(), deadline)
	sync := succeed()
	s := routedService(t, st, clk, api, "node", route, sync)
	s.routers[0].turn(ctx)
	require.Equal(t, 1, api.createCount())
	got, err := st.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State)

	// Polls until 15 minutes before the deadline: then it is pulled back.
	for clk.Now().Before(deadline.Add(-15 * time.Minute)) {
		clk.Advance(time.Minute)
		s.routers[0].turn(ctx)
	}
	clk.Advance(time.Minute) // the next poll reads the canceled batch
	s.routers[0].turn(ctx)
	got, err = st.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State, "back in the queue for the synchronous path")
	require.Zero(t, api.billedLines())
	require.Zero(t, sync.Calls())

	// The worker runs it synchronously, before its deadline.
	require.NoError(t, s.Start(ctx))
	got = waitFor(t, st, j.ID, jobstore.StateSucceeded)
	require.True(t, got.FinishedAt.Before(deadline))
	require.Equal(t, 1, sync.Calls())
	require.Empty(t, got.Result.Header.Get(BatchHeader))
	nanos, _ := spendNanos(t, st)
	require.Zero(t, nanos, "a canceled line costs nothing")
}

// TestBatchRouteLostSubmitAnswer: a batch the provider created whose
// answer was lost (a crash between the provider's answer and the store's
// write of its id) is found by its tag, not sent again.
func TestBatchRouteLostSubmitAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	api := newFakeBatchAPI(clk, time.Hour)
	api.loseAnswer = true
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 3, PollInterval: time.Minute}
	for range 3 {
		insertLow(t, st, clk.Now(), time.Time{})
	}
	s := routedService(t, st, clk, api, "node", route, nil)
	s.routers[0].turn(ctx)
	require.Equal(t, 1, api.createCount())
	clk.Advance(time.Minute)
	s.routers[0].turn(ctx) // finds it
	clk.Advance(time.Hour)
	s.routers[0].turn(ctx) // reads its results
	require.Equal(t, 1, api.createCount(), "not sent again")
	page, err := st.List(ctx, jobstore.ListParams{State: jobstore.StateSucceeded})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)
}

// TestBatchRouteQueueFull: a batch refused for the provider's queue
// limits sends its jobs back to the queue and smaller batches after.
func TestBatchRouteQueueFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	api := newFakeBatchAPI(clk, time.Hour)
	api.queueLimit = 40
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 10, MaxRequests: 100, PollInterval: time.Minute}
	for range 100 {
		insertLow(t, st, clk.Now(), time.Time{})
	}
	s := routedService(t, st, clk, api, "node", route, nil)
	s.routers[0].turn(ctx)
	clk.Advance(time.Hour)
	s.routers[0].turn(ctx)
	clk.Advance(time.Hour)
	s.routers[0].turn(ctx)
	page, err := st.List(ctx, jobstore.ListParams{State: jobstore.StateSucceeded, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 100)
	require.LessOrEqual(t, s.routers[0].maxJobs, 100)
	for _, b := range api.batches {
		require.LessOrEqual(t, len(b.lines), 40)
		for _, l := range b.lines {
			require.True(t, strings.HasPrefix(l.CustomID, "job_"))
			_, err := strconv.ParseInt(strings.TrimPrefix(l.CustomID, "job_"), 10, 64)
			require.NoError(t, err)
		}
	}
	_ = http.StatusOK
}

// queueFullHintError is a queue-full answer with the provider's Retry-After.
type queueFullHintError struct{ wait time.Duration }

func (e queueFullHintError) Error() string {
	return "batch requests in the processing queue: limit reached"
}
func (e queueFullHintError) RetryAfter() (time.Duration, bool) { return e.wait, true }

// TestBatchRouteQueueFullRetryAfter: a queue-full answer with the
// provider's Retry-After holds the router's next batch until it has
// passed (on the fake clock), then the jobs go, in smaller groups.
func TestBatchRouteQueueFullRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(batchT0)
	st := openStore(t)
	api := newFakeBatchAPI(clk, time.Hour)
	api.refuse = fmt.Errorf("%w: %w", ErrBatchQueueFull, queueFullHintError{wait: 10 * time.Minute})
	route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 10, MaxRequests: 40, PollInterval: time.Minute}
	for range 40 {
		insertLow(t, st, clk.Now(), time.Time{})
	}
	s := routedService(t, st, clk, api, "node", route, nil)
	r := s.routers[0]
	r.turn(ctx)
	require.Equal(t, 1, api.attempts, "refused, queue full")
	require.Equal(t, 20, r.maxJobs, "halved")
	for range 9 { // every poll of the Retry-After's ten minutes
		clk.Advance(time.Minute)
		r.turn(ctx)
		require.Equal(t, 1, api.attempts, "no batch before the provider's Retry-After (at %v)", clk.Now().Sub(batchT0))
	}
	clk.Advance(time.Minute)
	r.turn(ctx)
	require.Equal(t, 3, api.attempts, "the Retry-After has passed: the jobs go, in groups of 20")
	require.Equal(t, 2, api.createCount())
	clk.Advance(time.Hour)
	r.turn(ctx)
	page, err := st.List(ctx, jobstore.ListParams{State: jobstore.StateSucceeded, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 40)
}

// TestBatchRouteMaxBytesCountsTheLines: batch.max_bytes bounds a batch
// as the provider receives it, each line's wrapper (custom_id, the
// request object, the separators) and the create's envelope included:
// a bound of exactly k lines' create body makes a batch of k, one byte
// less a batch of k-1.
func TestBatchRouteMaxBytesCountsTheLines(t *testing.T) {
	t.Parallel()
	// createBody is the Anthropic create of lines, as the provider gets
	// it, built here with encoding/json rather than by the code under
	// test.
	createBody := func(lines []BatchLine) int64 {
		type request struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		}
		var body struct {
			Requests []request `json:"requests"`
		}
		for _, l := range lines {
			body.Requests = append(body.Requests, request{CustomID: l.CustomID, Params: l.Body})
		}
		b, err := json.Marshal(body)
		require.NoError(t, err)
		return int64(len(b))
	}
	for _, tc := range []struct {
		name  string
		less  int64
		lines int
	}{{"exactly 5 lines", 0, 5}, {"a byte less", 1, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(batchT0)
			st := openStore(t)
			var jobs []*jobstore.Job
			for range 8 {
				jobs = append(jobs, insertLow(t, st, clk.Now(), time.Time{}))
			}
			max := createBody(batchLines(jobs[:5])) - tc.less
			api := newFakeBatchAPI(clk, time.Hour)
			route := upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 1, MaxRequests: 100,
				MaxBytes: max, PollInterval: time.Minute}
			s := routedService(t, st, clk, api, "node", route, nil)
			require.True(t, s.routers[0].form(ctx, "/v1/messages"))
			require.Len(t, api.batches, 1)
			for _, b := range api.batches {
				require.Len(t, b.lines, tc.lines)
				require.LessOrEqual(t, createBody(b.lines), max, "the batch as sent fits the bound")
			}
		})
	}
}

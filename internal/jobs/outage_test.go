package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

// countingUpstream answers every job after release, with a result large
// enough to need new pages in a full SQLite file, and counts the calls per
// request body (each job's body is unique).
type countingUpstream struct {
	mu      sync.Mutex
	calls   map[string]int
	total   atomic.Int64
	release chan struct{}
}

func newCountingUpstream() *countingUpstream {
	return &countingUpstream{calls: map[string]int{}, release: make(chan struct{})}
}

func (u *countingUpstream) dispatcher() *fakeDispatcher {
	big := strings.Repeat("z", 16<<10)
	answer := `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"` + big +
		`"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":3}}`
	return &fakeDispatcher{fn: func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		u.mu.Lock()
		u.calls[string(req.Body)]++
		u.mu.Unlock()
		u.total.Add(1)
		select {
		case <-u.release:
			return reply(200, answer), nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}}
}

func (u *countingUpstream) duplicates() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.calls {
		n += c - 1
	}
	return n
}

// failedCompletes counts, per job, the result writes the store refused as
// unavailable: the test's signal that every held answer met the outage.
type failedCompletes struct {
	jobstore.Store
	mu     sync.Mutex
	failed map[int64]bool
}

func (f *failedCompletes) Complete(ctx context.Context, p jobstore.CompleteParams) error {
	err := f.Store.Complete(ctx, p)
	if errors.Is(err, jobstore.ErrUnavailable) {
		f.mu.Lock()
		f.failed[p.ID] = true
		f.mu.Unlock()
	}
	return err
}

func (f *failedCompletes) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.failed)
}

// TestStoreOutageNeverPaysTwice runs jobs whose answers arrive while the
// store is down (PostgreSQL cut off by a proxy; SQLite out of pages, as on
// a full disk), for longer than the lease: no job is called twice, every
// job succeeds once the store is back, and submitters meanwhile get 503
// with retry-after and no driver detail.
func TestStoreOutageNeverPaysTwice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		open func(t *testing.T) (st jobstore.Store, down, up func())
		// spools: the outage also stops the heartbeats, so the answers
		// must outlive their leases in the spool.
		spools bool
	}{
		{"postgres cut", func(t *testing.T) (jobstore.Store, func(), func()) {
			st, p := jobstoretest.OpenBehindProxy(t, jobstoretest.PostgresDSN(t), 8)
			return st, p.Cut, p.Restore
		}, true},
		{"sqlite full", func(t *testing.T) (jobstore.Store, func(), func()) {
			st := openStore(t)
			ctx := context.Background()
			return st, func() {
					_, err := jobstore.SetSQLiteMaxPages(ctx, st, 0)
					require.NoError(t, err)
				}, func() {
					_, err := jobstore.SetSQLiteMaxPages(ctx, st, jobstore.SQLiteMaxPagesNone)
					require.NoError(t, err)
				}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 24
			raw, down, up := tc.open(t)
			st := &failedCompletes{Store: raw, failed: map[int64]bool{}}
			u := newCountingUpstream()
			s := newService(t, st, u.dispatcher(), nil, func(c *Config) {
				c.LeaseFor, c.RescueInterval, c.Logger = 2*time.Second, 200*time.Millisecond, quiet
				c.SpoolDir = filepath.Join(t.TempDir(), "spool")
			})
			ids := make([]int64, n)
			for i := range ids {
				body := fmt.Sprintf(`{"upstream":"claude","request":{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"job %d"}]}}`, i)
				code, b := do(t, s.Handler(), "POST", "/v1/jobs", body)
				require.Equal(t, http.StatusAccepted, code, string(b))
				ids[i] = decode[JobView](t, b).ID
			}
			require.Eventually(t, func() bool { return u.total.Load() == n }, 10*time.Second, 5*time.Millisecond, "every job in flight")

			down()
			big := strings.Repeat("q", 64<<10)
			req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(
				`{"upstream":"claude","request":{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"`+big+`"}]}}`))
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			require.NotEmpty(t, rec.Header().Get("Retry-After"))
			require.NotEmpty(t, rec.Header().Get("Retry-After-Ms"))
			for _, leak := range []string{"127.0.0.1", "failed to connect", "disk is full", "(13)", "sqlite", "postgres"} {
				require.NotContains(t, rec.Body.String(), leak)
			}

			close(u.release) // the answers arrive while the store is down
			require.Eventually(t, func() bool { return st.count() == n }, 20*time.Second, 10*time.Millisecond,
				"every answer met the outage")
			if tc.spools {
				require.Eventually(t, func() bool { return s.spool.len() == n }, 20*time.Second, 10*time.Millisecond,
					"every answer outlived its lease in the spool")
			}
			up()
			for _, id := range ids {
				j := waitFor(t, raw, id, jobstore.StateSucceeded)
				require.Equal(t, 1, j.Attempts)
				require.Contains(t, string(j.Result.Body), "zzzz")
			}
			require.Equal(t, 0, u.duplicates(), "no job was called twice")
			require.Equal(t, int64(n), u.total.Load())
			require.True(t, s.spoolEmpty())
		})
	}
}

// unreachableStore answers every API call as a store that cannot be
// reached, with a driver-like detail that must never reach a client.
type unreachableStore struct{ jobstore.Store }

const driverDetail = "failed to connect to `user=postgres database=prod`: 10.1.2.3:5432: connect: connection refused"

var errUnreachable = fmt.Errorf("%w: %s", jobstore.ErrUnavailable, driverDetail)

func (unreachableStore) Insert(context.Context, jobstore.InsertParams) (jobstore.InsertResult, error) {
	return jobstore.InsertResult{}, errUnreachable
}
func (unreachableStore) Get(context.Context, int64) (*jobstore.Job, error) {
	return nil, errUnreachable
}
func (unreachableStore) List(context.Context, jobstore.ListParams) (jobstore.JobPage, error) {
	return jobstore.JobPage{}, errUnreachable
}
func (unreachableStore) Cancel(context.Context, jobstore.CancelParams) (jobstore.CancelResult, error) {
	return jobstore.CancelResult{}, errUnreachable
}
func (unreachableStore) Requeue(context.Context, jobstore.RequeueParams) (int, error) {
	return 0, errUnreachable
}
func (unreachableStore) SetPaused(context.Context, jobstore.PauseParams) error { return errUnreachable }
func (unreachableStore) PausedUpstreams(context.Context) ([]string, error) {
	return nil, errUnreachable
}
func (unreachableStore) CreateBatch(context.Context, jobstore.CreateBatchParams) (*jobstore.Batch, error) {
	return nil, errUnreachable
}
func (unreachableStore) GetBatch(context.Context, string) (*jobstore.Batch, error) {
	return nil, errUnreachable
}
func (unreachableStore) CancelBatch(context.Context, jobstore.CancelBatchParams) (jobstore.CancelBatchResult, error) {
	return jobstore.CancelBatchResult{}, errUnreachable
}

// TestJobRoutesAnswerStoreOutagesAs503: every jobs route answers a store
// outage with 503, retry-after and retry-after-ms, in the jobs API's
// envelope, without the driver's detail.
func TestJobRoutesAnswerStoreOutagesAs503(t *testing.T) {
	t.Parallel()
	s := newService(t, unreachableStore{Store: openStore(t)}, succeed(), nil, func(c *Config) { c.Owner, c.Logger = "manual", quiet })
	tests := []struct{ method, target, body string }{
		{"POST", "/v1/jobs", `{"upstream":"claude","request":` + anthropicBody + `}`},
		{"GET", "/v1/jobs", ""},
		{"GET", "/v1/jobs/1", ""},
		{"GET", "/v1/jobs/1?wait=1s", ""},
		{"DELETE", "/v1/jobs/1", ""},
		{"POST", "/v1/jobs/1/retry", ""},
		{"POST", "/v1/jobs/retry", `{"all":true}`},
		{"POST", "/v1/upstreams/claude/pause", ""},
		{"GET", "/v1/upstreams/paused", ""},
		{"POST", "/v1/batches?upstream=claude", `{"custom_id":"a","params":` + anthropicBody + `}`},
		{"GET", "/v1/batches/batch_1", ""},
		{"POST", "/v1/batches/batch_1/cancel", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			require.Equal(t, "5", rec.Header().Get("Retry-After"))
			require.Equal(t, "5000", rec.Header().Get("Retry-After-Ms"))
			e := decode[APIError](t, rec.Body.Bytes())
			require.Equal(t, "overloaded_error", e.Error.Type)
			require.Contains(t, e.Error.Message, "the job store is unavailable")
			require.NotContains(t, rec.Body.String(), "10.1.2.3")
			require.NotContains(t, rec.Body.String(), "postgres")
		})
	}
}

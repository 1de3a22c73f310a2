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
	"github.com/sluicehq/sluice/internal/jobsapi"
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
				ids[i] = decode[jobsapi.JobView](t, b).ID
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

package jobsapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

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
	s := newService(t, unreachableStore{Store: openStore(t)}, succeed(), nil, func(c *config) { c.Owner, c.Logger = "manual", quiet })
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
			e := decode[jobsapi.APIError](t, rec.Body.Bytes())
			require.Equal(t, "overloaded_error", e.Error.Type)
			require.Contains(t, e.Error.Message, "the job store is unavailable")
			require.NotContains(t, rec.Body.String(), "10.1.2.3")
			require.NotContains(t, rec.Body.String(), "postgres")
		})
	}
}

package jobsapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// hanging is a dispatcher whose calls wait until their context ends (a
// cancel aborting them) or the test ends (stop), counting the calls that
// started and the ones aborted.
type hanging struct {
	mu               sync.Mutex
	started, aborted int
	running, stop    chan struct{}
}

func (h *hanging) dispatcher() *fakeDispatcher {
	return &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		h.mu.Lock()
		h.started++
		h.mu.Unlock()
		h.running <- struct{}{}
		select {
		case <-ctx.Done():
		case <-h.stop:
			return reply(200, okMessage), nil
		}
		h.mu.Lock()
		h.aborted++
		h.mu.Unlock()
		return nil, context.Cause(ctx)
	}}
}

// TestRunsAreListedAndCanceledTogether: jobs submitted with a run_id and
// a custom_id show both, GET /v1/jobs?run_id= lists the run's jobs (a
// client's own, an admin's every client's), and POST /v1/jobs/cancel
// cancels every job of the run not yet finished (a client's own of it,
// aborting the calls that run; an admin's every client's), leaving the
// other runs and the finished jobs alone; a run with none of the
// caller's jobs is 404.
func TestRunsAreListedAndCanceledTogether(t *testing.T) {
	t.Parallel()
	h := &hanging{running: make(chan struct{}, 16), stop: make(chan struct{})}
	s := newService(t, nil, h.dispatcher(), nil, func(c *config) {
		c.API.AdminOf = func(r *http.Request) bool { return r.Header.Get("X-Admin") == "yes" }
	})
	t.Cleanup(func() { close(h.stop) }) // before the runtime's Stop: the calls left end
	as := func(client string) []string { return []string{"X-Sluice-Client", client} }
	admin := []string{"X-Sluice-Client", "ops", "X-Admin", "yes"}
	post := func(client, run, custom string) jobsapi.JobView {
		code, body := do(t, s.Handler(), "POST", "/v1/jobs", fmt.Sprintf(`{"upstream":"claude","request":%s,"run_id":%q,"custom_id":%q}`,
			anthropicBody, run, custom), as(client)...)
		require.Equal(t, http.StatusAccepted, code, string(body))
		v := decode[jobsapi.JobView](t, body)
		require.Equal(t, run, v.RunID)
		require.Equal(t, custom, v.CustomID)
		return v
	}
	a1 := post("a", "run_1", "line-1")
	<-h.running // a1 runs (its call hangs)
	a2, a3 := post("a", "run_1", "line-2"), post("a", "run_1", "line-3")
	b1 := post("b", "run_1", "line-1")
	other := post("a", "run_2", "line-1")

	list := func(query string, hdr []string) []jobsapi.JobView {
		code, body := do(t, s.Handler(), "GET", "/v1/jobs?"+query, "", hdr...)
		require.Equal(t, http.StatusOK, code, string(body))
		return decode[jobsapi.ListResponse](t, body).Data
	}
	idsOf := func(vs []jobsapi.JobView) []int64 {
		var out []int64
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	require.Equal(t, []int64{b1.ID, a3.ID, a2.ID, a1.ID}, idsOf(list("run_id=run_1", admin)), "an admin sees every client's jobs of the run")
	require.Equal(t, []int64{a3.ID, a2.ID, a1.ID}, idsOf(list("run_id=run_1", as("a"))), "a client sees its own")
	got := decode[jobsapi.JobView](t, func() []byte {
		_, b := do(t, s.Handler(), "GET", fmt.Sprintf("/v1/jobs/%d", a2.ID), "", as("a")...)
		return b
	}())
	require.Equal(t, "run_1", got.RunID)
	require.Equal(t, "line-2", got.CustomID)

	code, body := do(t, s.Handler(), "POST", "/v1/jobs/cancel", `{"run_id":"run_1"}`, as("a")...)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, jobsapi.CancelRunResponse{RunID: "run_1", Canceled: 3}, decode[jobsapi.CancelRunResponse](t, body))
	state := func(id int64) jobstore.State {
		code, body := do(t, s.Handler(), "GET", fmt.Sprintf("/v1/jobs/%d", id), "", admin...)
		require.Equal(t, http.StatusOK, code, string(body))
		return decode[jobsapi.JobView](t, body).State
	}
	for _, v := range []jobsapi.JobView{a1, a2, a3} {
		require.Equal(t, jobstore.StateCanceled, state(v.ID), "job %d", v.ID)
	}
	require.Eventually(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.aborted >= 1 }, 30*time.Second, time.Millisecond,
		"the running job's call was aborted")
	for _, v := range []jobsapi.JobView{b1, other} {
		require.False(t, state(v.ID).Finished(), "job %d (%s of %s) is left alone", v.ID, v.RunID, v.Client)
	}

	code, body = do(t, s.Handler(), "POST", "/v1/jobs/cancel", `{"run_id":"run_1"}`, as("c")...)
	require.Equal(t, http.StatusNotFound, code, "no job of c's in the run: %s", body)
	code, body = do(t, s.Handler(), "POST", "/v1/jobs/cancel", `{"run_id":"run_1"}`, admin...)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, 1, decode[jobsapi.CancelRunResponse](t, body).Canceled, "an admin cancels every client's")
	require.Equal(t, jobstore.StateCanceled, state(b1.ID))
	code, body = do(t, s.Handler(), "POST", "/v1/jobs/cancel", `{"run_id":"run_1"}`, admin...)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Zero(t, decode[jobsapi.CancelRunResponse](t, body).Canceled, "every job of it has finished")
}

func TestRunBadInput(t *testing.T) {
	t.Parallel()
	s := newService(t, nil, succeed(), nil, func(c *config) { c.Owner = "manual" })
	for _, tc := range []struct {
		name, method, path, body, want string
	}{
		{"run id with a space", "POST", "/v1/jobs", `{"upstream":"claude","request":` + anthropicBody + `,"run_id":"run 1"}`, "run_id"},
		{"run id too long", "POST", "/v1/jobs", `{"upstream":"claude","request":` + anthropicBody + `,"run_id":"` + strings.Repeat("r", 129) + `"}`, "run_id longer"},
		{"custom id too long", "POST", "/v1/jobs", `{"upstream":"claude","request":` + anthropicBody + `,"custom_id":"` + strings.Repeat("c", 513) + `"}`, "custom_id longer"},
		{"cancel without a run", "POST", "/v1/jobs/cancel", `{}`, "run_id is required"},
		{"cancel with a bad run", "POST", "/v1/jobs/cancel", `{"run_id":"a/b"}`, "run_id"},
		{"cancel with another field", "POST", "/v1/jobs/cancel", `{"run_id":"r","ids":[1]}`, "ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, s.Handler(), tc.method, tc.path, tc.body)
			require.Equal(t, http.StatusBadRequest, code, string(body))
			require.Contains(t, decode[jobsapi.APIError](t, body).Error.Message, tc.want)
		})
	}
}

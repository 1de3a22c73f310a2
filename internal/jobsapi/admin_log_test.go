package jobsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// TestAdminJobActionsAreLogged: a cancel, a retry, a bulk requeue, a
// batch's cancel and a run's cancel made by an admin each write one "job
// admin action" line naming the admin, the action, the jobs and the
// request id the answer carries (issue 27: only pause and resume were
// logged); the same actions by a client on its own jobs write none.
func TestAdminJobActionsAreLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	st := openStore(t)
	s := newService(t, st, succeed(), nil, func(c *config) {
		c.Owner = "manual" // nothing runs: the jobs stay as the test puts them
		c.API.Logger = log
		c.API.AdminOf = func(r *http.Request) bool { return r.Header.Get("X-Admin") == "yes" }
	})
	h := s.Handler()
	admin := []string{"X-Sluice-Client", "ops", "X-Admin", "yes"}
	own := []string{"X-Sluice-Client", "team"}
	// The jobs killed are claude's; the others gpt's, which kill never claims.
	submit := func(upstream, extra string) int64 {
		req := anthropicBody
		if upstream == "gpt" {
			req = openAIBody
		}
		code, body := do(t, h, "POST", "/v1/jobs", `{"upstream":"`+upstream+`","request":`+req+extra+`}`, own...)
		require.Equal(t, http.StatusAccepted, code, string(body))
		return decode[jobsapi.JobView](t, body).ID
	}
	kill := func(id int64) {
		jobs, err := st.Claim(context.Background(), jobstore.ClaimParams{Upstream: "claude", Limit: 1, Owner: "test", LeaseFor: time.Minute, Now: time.Now()})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, id, jobs[0].ID)
		_, err = st.Fail(context.Background(), jobstore.FailParams{ID: id, Token: jobs[0].Lease.Token, Kind: jobstore.FailTerminal,
			Error: jobstore.AttemptError{Status: 400, Kind: "client_error", Message: "bad"}, Now: time.Now()})
		require.NoError(t, err)
	}
	type call struct {
		method, path, body string
		hdr                []string
	}
	ok := func(c call) string {
		code, body := do(t, h, c.method, c.path, c.body, c.hdr...)
		require.True(t, code == http.StatusOK, "%s %s: %d %s", c.method, c.path, code, body)
		return string(body)
	}

	// A client's own actions: no line.
	mine := submit("gpt", "")
	ok(call{"DELETE", fmt.Sprintf("/v1/jobs/%d", mine), "", own})
	dead := submit("claude", "")
	kill(dead)
	ok(call{"POST", fmt.Sprintf("/v1/jobs/%d/retry", dead), "", own})
	submit("gpt", `,"run_id":"run_own"`)
	ok(call{"POST", "/v1/jobs/cancel", `{"run_id":"run_own"}`, own})
	require.Empty(t, logs.String(), "a client's changes to its own jobs are not logged")

	// An admin's: one line each.
	kill(dead)
	victim := submit("gpt", "")
	submit("gpt", `,"run_id":"run_7"`)
	code, body := do(t, h, "POST", "/v1/batches?upstream=gpt",
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":`+openAIBody+`}`+"\n", own...)
	require.Equal(t, http.StatusOK, code, string(body))
	batch := decode[jobsapi.BatchView](t, body).ID
	ok(call{"POST", fmt.Sprintf("/v1/jobs/%d/retry", dead), "", admin})
	kill(dead)
	ok(call{"POST", "/v1/jobs/retry", `{"all":true}`, admin})
	ok(call{"DELETE", fmt.Sprintf("/v1/jobs/%d", victim), "", admin})
	ok(call{"POST", "/v1/batches/" + batch + "/cancel", "", admin})
	ok(call{"POST", "/v1/jobs/cancel", `{"run_id":"run_7"}`, admin})

	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		require.Equal(t, "job admin action", rec["msg"], l)
		require.Equal(t, "INFO", rec["level"], l)
		require.Equal(t, "ops", rec["admin"], l)
		require.Regexp(t, `^req_`, rec["request_id"], l)
		got = append(got, rec)
	}
	require.Len(t, got, 5, logs.String())
	want := []map[string]any{
		{"action": "retry", "job": float64(dead), "client": "team"},
		{"action": "requeue", "all": true, "requeued": float64(1)},
		{"action": "cancel", "job": float64(victim), "client": "team"},
		{"action": "cancel_batch", "batch_id": batch, "canceled": float64(1)},
		{"action": "cancel_run", "run_id": "run_7", "canceled": float64(1)},
	}
	for i, w := range want {
		for k, v := range w {
			require.Equal(t, v, got[i][k], "line %d %s: %v", i, k, got[i])
		}
	}
}

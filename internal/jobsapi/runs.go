package jobsapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// checkRunID validates a submit's run_id: empty (no run), or at most
// jobstore.MaxRunIDLen letters, digits, '.', '_', ':' or '-', so it goes
// in a query string and on a command line as it is.
func checkRunID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > jobstore.MaxRunIDLen {
		return fmt.Errorf("run_id longer than %d bytes", jobstore.MaxRunIDLen)
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && !strings.ContainsRune("._:-", c) {
			return fmt.Errorf("run_id %q: want letters, digits, '.', '_', ':' or '-'", id)
		}
	}
	return nil
}

// CancelRunRequest is the body of POST /v1/jobs/cancel: the run whose
// jobs not yet finished are canceled.
type CancelRunRequest struct {
	RunID string `json:"run_id"`
}

// CancelRunResponse is its answer: how many jobs were canceled (0 when
// every job of the run had finished).
type CancelRunResponse struct {
	RunID    string `json:"run_id"`
	Canceled int    `json:"canceled"`
}

// serveCancelRun cancels every queued or running job of a run: a client's
// own jobs of it, an admin's every client's (their running calls are
// aborted, their webhooks sent as for a single cancel). A run with no job
// of the caller's answers 404.
func (a *API) serveCancelRun(w http.ResponseWriter, r *http.Request) {
	var req CancelRunRequest
	if !decodeBody(w, r, 1<<20, &req, `one JSON object like {"run_id":"run_…"}`) {
		return
	}
	if req.RunID == "" {
		writeError(w, http.StatusBadRequest, "run_id is required")
		return
	}
	if err := checkRunID(req.RunID); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	client := ""
	if !a.admin(r) {
		client = a.cfg.ClientOf(r)
	}
	res, err := a.rt.CancelRun(r.Context(), req.RunID, client)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no run %q", req.RunID)
		return
	case err != nil:
		a.storeError(w, "canceling the run", err)
		return
	}
	a.logAdminAction(w, r, actionCancelRun, "run_id", req.RunID, "canceled", res.Total())
	writeJSON(w, http.StatusOK, CancelRunResponse{RunID: req.RunID, Canceled: res.Total()})
}

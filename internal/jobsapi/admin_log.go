package jobsapi

import "net/http"

// The admin actions on jobs (adminAction's action).
const (
	actionCancel      = "cancel"       // DELETE /v1/jobs/{id}, POST /v1/jobs/{id}/cancel
	actionRetry       = "retry"        // POST /v1/jobs/{id}/retry
	actionRequeue     = "requeue"      // POST /v1/jobs/retry
	actionCancelBatch = "cancel_batch" // POST /v1/batches/{id}/cancel
	actionCancelRun   = "cancel_run"   // POST /v1/jobs/cancel
)

// logAdminAction writes the log line of a change an admin made to the job
// queue, which may reach other clients' jobs: "job admin action" with who
// (admin: the caller's client name), what (action), the answer's
// request_id, and attrs naming the jobs and how many changed; as the
// clients API logs "client admin action" and pausing an upstream logs
// itself. A client's change to its own jobs is its own business and is
// not logged.
func (a *API) logAdminAction(w http.ResponseWriter, r *http.Request, action string, attrs ...any) {
	if !a.admin(r) {
		return
	}
	a.cfg.Logger.Info("job admin action", append([]any{"admin", a.cfg.ClientOf(r), "action", action, "request_id", RequestID(w)}, attrs...)...)
}

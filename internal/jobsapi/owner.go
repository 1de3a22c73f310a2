package jobsapi

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Ownership: every job and batch belongs to the client that submitted it
// (Config.ClientOf). A caller that is not an admin (Config.AdminOf) sees,
// waits on, cancels, retries and lists only its own; another client's id
// answers 404 exactly as an id that does not exist, so a client cannot
// learn which ids are taken. Admins see and manage everything, and alone
// may pause upstreams and requeue across clients.

// admin reports whether r's caller may see and manage every client's jobs.
func (a *API) admin(r *http.Request) bool { return a.cfg.AdminOf(r) }

// owns reports whether r's caller may see a job or batch of client.
func (a *API) owns(r *http.Request, client string) bool {
	return a.admin(r) || client == a.cfg.ClientOf(r)
}

// ownedJob loads job id for r's caller, answering 404 when it does not
// exist or belongs to another client (and the caller is no admin).
func (a *API) ownedJob(w http.ResponseWriter, r *http.Request, id int64) (*jobstore.Job, bool) {
	j, err := a.store.Get(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound) || (err == nil && !a.owns(r, j.Client)):
		writeError(w, http.StatusNotFound, "no job %d", id)
		return nil, false
	case err != nil:
		a.storeError(w, "loading the job", err)
		return nil, false
	}
	return j, true
}

// forbidden answers 403 in the API's error shape.
func forbidden(w http.ResponseWriter, what string) {
	writeAPIError(w, http.StatusForbidden, ErrorDetail{Type: "permission_error",
		Message: what + " needs an admin client key (role: admin)"})
}

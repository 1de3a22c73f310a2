package jobs

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// jobRequest builds the engine request for j through the front door, as
// the gateway builds a live request: the job's priority, client and
// deadline take the place of the headers a live client would send.
func jobRequest(p llm.Protocol, j *jobstore.Job, now time.Time) (*dispatch.Request, *provider.RequestError) {
	prio := j.Priority
	caller := frontdoor.InProcess
	caller.Name = j.Client
	return frontdoor.Build(frontdoor.Input{
		Protocol: p, Method: http.MethodPost, Path: j.Path, Body: j.Body, Caller: caller,
		Override: frontdoor.Override{Priority: &prio, Client: j.Client, Deadline: j.Deadline},
		Now:      now, RequestID: jobRequestID(j.ID),
	})
}

// jobRequestID is a job's request id: sent upstream as X-Sluice-Request-Id
// on each of its attempts and written in its log lines.
func jobRequestID(id int64) string { return "job_" + strconv.FormatInt(id, 10) }

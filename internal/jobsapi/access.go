package jobsapi

import (
	"fmt"
	"net/http"
)

// permit asks the admission layer (Config.Permit) whether r's client may
// send to upstream a request for model ("": the upstream alone). The
// error's message says what the client may use; it is answered 403
// permission_error, never skipped like an invalid line.
func (a *API) permit(r *http.Request, upstream, model string) error {
	if a.cfg.Permit == nil {
		return nil
	}
	return a.cfg.Permit(a.cfg.ClientOf(r), upstream, model)
}

// lineModel is one request of a batch and the model it asks for.
type lineModel struct {
	line  int // as the door names it: 1-based line, or the request's index
	model string
}

// permitLines checks every request of a batch: the first one refused
// makes the whole batch refused, naming it as the door does (lineFormat:
// "line %d", "requests.%d") and how many more were.
func (a *API) permitLines(r *http.Request, upstream, lineFormat string, lines []lineModel) error {
	var first error
	firstLine, n := 0, 0
	for _, l := range lines {
		if err := a.permit(r, upstream, l.model); err != nil {
			if first == nil {
				first, firstLine = err, l.line
			}
			n++
		}
	}
	if first == nil {
		return nil
	}
	more := ""
	if n > 1 {
		more = fmt.Sprintf(" (and %d more requests of the batch)", n-1)
	}
	return fmt.Errorf("%s%s: %w; nothing was queued", fmt.Sprintf(lineFormat, firstLine), more, first)
}

// writePermissionError answers a refusal of permit in the jobs API's
// envelope: 403 permission_error.
func writePermissionError(w http.ResponseWriter, err error) {
	writeAPIError(w, http.StatusForbidden, ErrorDetail{Type: "permission_error", Message: err.Error()})
}

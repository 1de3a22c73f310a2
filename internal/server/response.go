package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/internal/frontdoor"
)

// relay copies an upstream response, readied by frontdoor.PrepareResponse,
// to the client: status, headers, then the body, flushed after every read
// so streamed events reach the client as they arrive. If the client goes
// away the copy stops; the caller closes the body, which ends the upstream
// request. A stream always ends with a terminal event: when the upstream
// breaks it off or the gateway cuts it at shutdown, the prepared body ends
// with the protocol's error event (frontdoor.PrepareResponse), which is
// flushed before the handler returns and the connection closes. It
// returns the message of that event when Sluice added one.
func relay(w http.ResponseWriter, r *http.Request, resp *http.Response, log *slog.Logger) (cut string) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	body := resp.Body
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return "" // client gone
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return ""
			}
		}
		if err == io.EOF {
			cut, _ = frontdoor.StreamCut(body)
			return cut
		}
		if err != nil {
			if r.Context().Err() == nil {
				// A body that is not a stream simply ends short: with a
				// Content-Length the server closes the connection, so the
				// client sees the truncation.
				log.Warn("relaying upstream body", "path", r.URL.Path, "err", err)
			}
			return ""
		}
	}
}

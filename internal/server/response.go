package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// relay copies an upstream response, readied by frontdoor.PrepareResponse,
// to the client: status, headers, then the body, flushed after every read
// so streamed events reach the client as they arrive. If
// the client goes away the copy stops; the caller closes the body, which
// ends the upstream request. If the upstream breaks off a stream, the
// client gets the protocol's error event, as the provider itself would send.
func relay(w http.ResponseWriter, r *http.Request, p llm.Protocol, resp *http.Response, log *slog.Logger) {
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
				return // client gone
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			log.Warn("relaying upstream body", "path", r.URL.Path, "err", err)
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				_, _ = w.Write(provider.StreamErrorEvent(p, "", "the upstream stream was interrupted"))
				_ = rc.Flush()
			}
			// A non-streamed body simply ends short: with a Content-Length
			// the server closes the connection, so the client sees the
			// truncation.
			return
		}
	}
}

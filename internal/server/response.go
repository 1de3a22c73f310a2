package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/provider"
)

// relayBufs recycles relay's copy buffers.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies an upstream response, readied by frontdoor.PrepareResponse,
// to the client: status, headers, then the body. A stream (or a body of
// unknown length) is flushed after every read so events reach the client
// as they arrive; a JSON body of known length is written through and goes
// out with the headers when the handler returns, in one write. If the
// client goes away the copy stops; the caller closes the body, which ends the upstream
// request. A stream always ends with a terminal event: when the upstream
// breaks it off or the gateway cuts it at shutdown, the prepared body ends
// with the protocol's error event (frontdoor.PrepareResponse), which is
// flushed before the handler returns and the connection closes. It
// returns the message of that event when Sluice added one.
func relay(w http.ResponseWriter, r *http.Request, resp *http.Response, log *slog.Logger) (cut string) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs // the upstream response is ours and is not read again
	}
	body := resp.Body
	w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0 || provider.IsEventStream(resp.Header)
	rc := http.NewResponseController(w)
	if flush {
		_ = rc.Flush()
	}
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return "" // client gone
			}
			if flush {
				if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
					return ""
				}
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

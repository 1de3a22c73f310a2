package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Response headers Sluice adds to every proxied answer.
const (
	// HeaderQueueMS is how long the request waited in Sluice's queue before
	// its first upstream attempt, in whole milliseconds.
	HeaderQueueMS = "X-Sluice-Queue-Ms"
	// HeaderAttempts is how many upstream attempts Sluice made (0 when it
	// gave up before sending anything).
	HeaderAttempts = "X-Sluice-Attempts"
)

func setSluiceHeaders(h http.Header, queueWait time.Duration, attempts int) {
	h.Set(HeaderQueueMS, strconv.FormatInt(max(queueWait.Milliseconds(), 0), 10))
	h.Set(HeaderAttempts, strconv.Itoa(attempts))
}

// writeProviderError answers with an error body in the upstream protocol's
// own shape (provider.ErrorBody), so SDKs raise their usual exception.
// errType "" means the protocol's type for the status. Headers in extra are
// added; x-should-retry defaults to false, because Sluice has already done
// whatever retrying was worth doing.
func writeProviderError(w http.ResponseWriter, p llm.Protocol, reqID string, status int, errType, message string, extra http.Header) {
	if errType == "" {
		errType = provider.ErrorTypeFor(p, status)
	}
	h := w.Header()
	for k, vs := range extra {
		h[k] = vs
	}
	if h.Get("X-Should-Retry") == "" {
		h.Set("X-Should-Retry", "false")
	}
	if h.Get(HeaderQueueMS) == "" {
		setSluiceHeaders(h, 0, 0)
	}
	if p == llm.OpenAI {
		h.Set("X-Request-Id", reqID)
	} else {
		h.Set("Request-Id", reqID)
	}
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(provider.ErrorBody(p, status, errType, message, reqID))
}

// relay copies an upstream response to the client: status, headers (minus
// hop-by-hop), Sluice's headers, then the body, flushed after every read so
// streamed events reach the client as they arrive. A terminal upstream
// error (the engine passes those through instead of retrying) gets
// x-should-retry: false so the client's SDK does not retry it either. If
// the client goes away the copy stops; the caller closes the body, which
// ends the upstream request. If the upstream breaks off a stream, the
// client gets the protocol's error event, as the provider itself would send.
func relay(w http.ResponseWriter, r *http.Request, p llm.Protocol, resp *http.Response, body io.Reader, queueWait time.Duration, attempts int, log *slog.Logger) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	removeHopByHop(h)
	setSluiceHeaders(h, queueWait, attempts)
	if resp.StatusCode >= 400 {
		h.Set("X-Should-Retry", "false")
	}
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

// hopByHop are the connection-specific headers (RFC 9110 §7.6.1) never
// forwarded.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes hop-by-hop headers, including those the
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

package frontdoor

import (
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/provider"
)

// PrepareResponse readies an engine response for the caller, the same way
// on every front door: hop-by-hop headers removed, x-sluice-queue-ms and
// x-sluice-attempts set, x-should-retry: false on a passed-through
// provider error (Sluice has already done the retrying worth doing), and,
// when req asked a stream for usage on the caller's behalf, that chunk
// stripped from a 2xx body (provider.NewUsageStripper; Content-Length
// removed).
func PrepareResponse(req *dispatch.Request, resp *dispatch.Response) {
	h := resp.Header
	if h == nil {
		h = http.Header{}
		resp.Header = h
	}
	RemoveHopByHop(h)
	SetSluiceHeaders(h, resp.QueueWait, resp.Attempts)
	if resp.StatusCode >= 400 {
		h.Set(HeaderShouldRetry, "false")
	}
	if req.UsageInjected && resp.StatusCode/100 == 2 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{provider.NewUsageStripper(resp.Body), resp.Body}
		h.Del("Content-Length")
		resp.ContentLength = -1
	}
}

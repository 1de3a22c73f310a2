package frontdoor

import (
	"context"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/provider"
)

// PrepareResponse readies an engine response for the caller, the same way
// on every front door: hop-by-hop headers removed, x-sluice-queue-ms,
// x-sluice-attempts, x-sluice-upstream, x-sluice-key and x-sluice-request-id (the id Build sent upstream) set, x-should-retry: false on a passed-through
// provider error (Sluice has already done the retrying worth doing), and,
// when req asked a stream for usage on the caller's behalf, that chunk
// stripped from a 2xx body (provider.NewUsageStripper; Content-Length
// removed). A 2xx event stream's body always ends with a terminal event
// (streamBody): if the upstream breaks it off or the gateway stops
// (dispatch.ErrStopped as the cause of the context the request was sent
// with, or as the body's read error), the protocol's error event is added
// before the end; if the caller went away it ends quietly.
func PrepareResponse(req *dispatch.Request, resp *dispatch.Response) {
	h := resp.Header
	if h == nil {
		h = http.Header{}
		resp.Header = h
	}
	RemoveHopByHop(h)
	SetSluiceHeaders(h, resp.QueueWait, resp.Attempts)
	if resp.Upstream != "" {
		h.Set(HeaderUpstream, resp.Upstream)
	}
	if resp.Key != "" {
		h.Set(HeaderKey, resp.Key)
	}
	if id := req.Header.Get(HeaderRequestID); id != "" {
		h.Set(HeaderRequestID, id)
	}
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
	if resp.StatusCode/100 == 2 && provider.IsEventStream(h) {
		ctx := context.Background()
		if resp.Request != nil {
			ctx = resp.Request.Context() // the context the engine sent it with
		}
		resp.Body = newStreamBody(ctx, resp.Protocol, resp.Body, resp.End)
	}
}

package server

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// newEngine is the one assembly of an upstream's engine from its config,
// used for every upstream of every Server (sluice serve, and sluice batch
// run --store, which runs a Server in-process): the upstream config goes
// to the dispatcher whole, with the server's transport (bounded by the
// upstream's request_timeout, its idle pool sized from max_concurrency),
// clock and metrics, and the record of stored Responses' keys kept in the
// job store (nil: none).
func newEngine(uc upcfg.Config, o options, obs dispatch.Observer, responses dispatch.ResponseStore) (*dispatch.Dispatcher, error) {
	return dispatch.New(dispatch.Config{
		Config:     uc,
		HTTPClient: &http.Client{Transport: dispatch.UpstreamTransport(o.transport, uc)},
		// Flex answers are slower: their own response-header timeout.
		FlexHTTPClient: &http.Client{Transport: dispatch.FlexTransport(o.transport, uc)},
		Clock:          o.clock,
		Observer:       obs,
		States:         stateLog{log: o.logger, upstream: uc.Name},
		Tracer:         o.tracerOrNoop(),
		Responses:      responses,
	})
}

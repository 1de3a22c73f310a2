// Package frontdoor is the one way into Sluice's engine. Every front door
// (the gateway's proxy routes, the in-process Transport, the job workers
// and the jobs API) goes through it, so a request is built the same way
// and an error reads the same whichever door it came through:
//
//   - headers.go names every header Sluice reads or sets, and holds the
//     one list of hop-by-hop, credential and Sluice headers that never go
//     upstream (CleanHeader).
//   - request_builder.go turns a client's request (protocol, method, path,
//     headers, body, the authenticated caller, the Go API's context values)
//     into a *dispatch.Request, or a provider-shaped request error: cost
//     estimate, header hygiene, priority, deadline, and the stream-usage
//     chunk asked for on the caller's behalf.
//   - response.go readies the engine's answer on the way back
//     (PrepareResponse): Sluice's headers, and that chunk stripped again.
//   - problem.go renders every answer Sluice gives itself (a request error
//     or an engine give-up) in the provider's own error shape, with
//     retry-after, retry-after-ms, x-should-retry and Sluice's headers, to
//     an http.ResponseWriter or as an *http.Response.
//   - transport.go is the http.RoundTripper the official Go SDKs accept.
//
// The upstream's key itself is placed by the dispatcher, which holds it
// (provider.SetUpstreamHeaders).
package frontdoor

// Package opsview is the operator's read model of a gateway: what
// GET /v1/status, GET /v1/status/history, GET /metrics and the dashboard
// (/ui) show.
//
// A View reads the upstreams' engines, the admission layer (client
// limits, spend and budgets), the job store's counts and the cluster node
// through narrow interfaces defined here (Engine, Admission, JobStore,
// Cluster), and is fed by the engines', the job runtime's, the admission
// layer's and the cluster node's Observer hooks, which it implements as
// the Prometheus adapter at the edge. It keeps what no Prometheus series
// gives cheaply: the dashboard's outcome counts and latency reservoirs,
// each client's usage and the scheduled requests being served, recorded
// by the server as it answers (Serving, Answered); and a history ring of
// the last minutes (HistorySampler, a lifecycle.Service).
//
// It speaks no HTTP and authenticates nobody: the server builds it, gives
// it its sources (Bind), and renders what it returns (Status, History,
// Registry for the metrics endpoint), filtering the status for a caller
// who is not an admin (StatusResponse.ForCaller). Every record is O(1)
// under a short lock or an atomic add; the store is read on scrape or on
// a status request, at most once per JobCountMaxAge, bounded by
// JobCountTimeout.
package opsview

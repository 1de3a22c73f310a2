// Package server is Sluice's HTTP front door: a drop-in proxy for the
// Anthropic Messages and OpenAI Chat Completions APIs.
//
// Each configured upstream is served under /{upstream}/. The two scheduled
// routes, POST /{upstream}/v1/messages (anthropic upstreams) and POST
// /{upstream}/v1/chat/completions (openai upstreams), are authenticated,
// parsed and costed here, then handed to the upstream's dispatcher, which
// queues them by priority, admits them against the quotas, retries them
// and answers; the response (streamed or not) is relayed to the client as
// it arrives. Every other path under /{upstream}/ is forwarded as it is, with
// the client's credentials swapped for the upstream key, so SDK features
// Sluice does not schedule keep working.
//
// Errors Sluice produces itself use the upstream protocol's own error
// shape, so official SDKs raise their usual exceptions; when Sluice gives up
// it says how long to wait (retry-after, retry-after-ms) and tells SDKs not
// to retry on their own (x-should-retry: false), because it already did.
//
// The server also serves GET /healthz, GET /metrics (Prometheus) and GET
// /v1/status (per-upstream queue, quota and breaker state): it
// authenticates the caller and renders what the operator view
// (internal/opsview) reports.
package server

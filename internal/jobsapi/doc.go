// Package jobsapi is the HTTP API of Sluice's durable job queue: the
// routes the gateway mounts under /v1/jobs, /v1/batches and /v1/upstreams
// (API, built by New from a Config), their request and response types,
// and the job's JSON (JobView), which the runtime's webhooks also carry.
//
// A submit is validated here (the upstream, the request body checked by
// the front door's own request builder, frontdoor.Build, exactly as the
// worker will build the call, the priority, deadline, attempts, webhook
// URL and idempotency key) and inserted into the jobstore.Store: a job is
// durable from the 202. Reads, lists, retries, pauses and batch results
// go to the store too. What must reach the jobs running in this process
// goes through Runtime, which package jobs implements: a cancel aborts a
// running call, a redeliver wakes the webhook sender, and a long poll
// (GET /v1/jobs/{id}?wait=) wakes when a job finishes here
// (Runtime.Finished) and otherwise reads the store every
// Config.PollInterval. The API imports neither the runtime nor the engine
// (internal/dispatch), and runs no goroutine of its own: it has no Start
// or Stop, and answers before the runtime starts (jobs queue and run once
// the workers start).
//
// # The providers' batch APIs
//
// ServeProvider answers the providers' own batch routes under an
// upstream's prefix (Anthropic's Message Batches; OpenAI's Batch and
// Files), so the official SDKs queue their batches here: a view over
// Sluice batches (provider.go), with the provider's objects, results and
// error shapes.
//
// # Ownership
//
// A job or batch belongs to the client that submitted it; a caller that is
// not an admin sees and manages only its own, and another client's id
// answers 404 like an id that does not exist (owner.go).
//
// # Errors
//
// Every route answers errors in one envelope, shaped like Anthropic's
// ({"type":"error","error":{"type","message"}}, APIError), rendered by the
// front door (WriteAPIError); a store that cannot answer is a 503 with
// retry-after (StoreRetryAfter) and without the driver's detail.
package jobsapi

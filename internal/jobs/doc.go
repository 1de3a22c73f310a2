// Package jobs is the runtime of Sluice's durable job queue: the workers
// that lease jobs from a jobstore.Store and run them through the same
// per-upstream dispatchers as proxy traffic (so priorities and quotas apply
// across both), and the HTTP API (/v1/jobs, /v1/batches, /v1/upstreams)
// the server mounts.
//
// # Workers
//
// Each upstream has one worker loop. It keeps at most
// Config.MaxInFlightPerUpstream jobs handed to the dispatcher, so a job is
// leased only when the dispatcher can send it soon and leases are never held
// in a long queue. It claims in batches of up to Config.ClaimBatch, and when
// nothing is claimable it sleeps until the store signals new work, the next
// scheduled job's time comes, or Config.PollInterval passes (the signal does
// not cross processes on SQLite).
//
// Each leased job runs through Dispatcher.Do with its priority, client,
// deadline and estimated cost (provider.Estimate on the stored body). A
// heartbeat renews the lease every Config.HeartbeatEvery while the call, or
// the read of its body, is alive; when the store says the lease is lost
// (the job was canceled, or rescued and claimed by another worker) the call
// is aborted. The result is written with the lease's fencing token, so a
// worker that lost its lease can never overwrite a newer attempt:
//
//	success (2xx, complete)             → succeeded, response kept
//	rate outcomes, shed, queue deadline → requeued at the hint, no attempt burnt
//	overload, transient, stream failure → requeued with backoff, one attempt burnt
//	quota, client error, too large      → dead, the provider's error kept
//	attempts or deadline exhausted      → dead
//
// Stop stops claiming, lets in-flight jobs finish for the time ctx allows,
// then aborts the rest and hands their leases back (requeued without
// burning an attempt), so a restart picks them up at once.
//
// # Metrics
//
// Config.Observer receives the runtime's events: jobs submitted, each
// attempt's start (with the time the job waited since it became available)
// and its outcome (AttemptOutcome) and duration, jobs finished here, rescue
// passes and webhook deliveries. The server's Prometheus adapter implements
// it; the runtime itself knows nothing of Prometheus.
//
// # Webhooks
//
// A job with a webhook_url is POSTed to it when it finishes, as the JSON of
// the job, signed with X-Sluice-Signature: sha256=<hex HMAC-SHA256 of the
// body keyed with Config.WebhookSecret>, and retried with backoff up to
// Config.WebhookMaxAttempts times. Webhooks are best effort: a crash loses
// the deliveries not yet made.
package jobs

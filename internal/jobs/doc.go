// Package jobs is the runtime of Sluice's durable job queue: the workers
// that lease jobs from a jobstore.Store and run them through the same
// per-upstream dispatchers as proxy traffic (so priorities and quotas apply
// across both), the result spool, the lease rescuer and the webhook
// sender, under one Start and Stop (Service). The HTTP API that queues the
// jobs (/v1/jobs, /v1/batches, /v1/upstreams) is package jobsapi, which
// reaches the runtime through jobsapi.Runtime: Service.Cancel,
// CancelBatch, Redeliver and Finished.
//
// # Workers
//
// Each upstream has one worker loop (workerLoop, each of its steps a
// method), and a job is leased (running) only while its one call is
// admitted and in flight. The loop reads the store's backlog per priority
// class (jobstore.Store.Backlog), keeps up to
// Config.MaxInFlightPerUpstream admissions outstanding spread over the
// classes with work, and asks the upstream's engine for each
// (Dispatcher.Acquire): it waits in the same scheduler as live traffic, so
// weighted fair queueing, quotas and the breaker apply across both. Only
// once a ticket is admitted does it claim a job of that class (with the
// tickets admitted meanwhile and those the engine admits at once, in one
// claim of up to Config.ClaimBatch); a ticket left without a job is given
// back. Waiting for quota, for a backoff or for an open breaker therefore
// happens in the store (queued, available_at), never under a lease. When
// there is nothing to wait for, the loop offers its free slots to
// jobstore.Handoff: a job submitted then is leased in its insert and runs
// at once if the engine admits it at once (TryAcquire), else it is handed
// back to the queue unsent.
//
// Each call is exactly one upstream attempt (Ticket.Call) with the job's
// stored body and its estimated cost (provider.Estimate). A heartbeat
// renews the lease every Config.HeartbeatEvery while the call, or the read
// of its body, is alive; when the store says the lease is lost (the job was
// canceled, or rescued and claimed by another worker) the call is aborted.
// The engine's outcome goes through dispatch.DecideFate, and the result is
// written with the lease's fencing token, so a worker that lost its lease
// can never overwrite a newer attempt:
//
//	success (2xx, complete)                 → succeeded, response kept
//	not sent (cost did not fit, stopped)    → requeued when it fits, no attempt burnt
//	rate limit                              → requeued at its hint, one attempt burnt
//	overload, transient, stream failure     → requeued with backoff, one attempt burnt; or, on an
//	                                          upstream with a fallback that can take it now, the
//	                                          attempt recorded and the call made again at once
//	                                          there, under the same lease (Config.Admission's
//	                                          Reroute: the rule a live request falls back by)
//	quota, client error, too large, x-should-retry: false → dead, the provider's error kept
//	attempts or deadline exhausted          → dead
//
// A store that cannot take the result (jobstore.ErrUnavailable) does not
// lose it: a success or terminal failure is written to the spool
// (Config.SpoolDir, spool.go) at once, so a crash cannot lose it, and the
// write is retried with backoff while the lease can be trusted, the
// heartbeat renewing it all along (an outage is no lost lease); the store
// taking it removes the entry. Past that point, at Stop, or after a crash,
// the entry is written back before any claim, at start-up too, through
// jobstore.Store.CompleteSpooled, which keeps the answer even if the
// rescuer requeued the job. A job is
// therefore called again only for a call in flight at a crash, or in the
// windows docs/jobs.md lists.
//
// Every call that reaches the provider burns one of the job's MaxAttempts
// (a half-open breaker probe included), so MaxAttempts bounds the job's
// provider calls and its error history has one entry per failed call.
//
// Stop stops claiming, lets in-flight calls finish for the time ctx allows,
// then aborts the rest and hands their leases back (requeued without
// burning an attempt: a call cut off by the gateway's own shutdown counts
// like a call in flight at a crash), so a restart picks them up at once.
//
// # Metrics
//
// Config.Observer receives the runtime's events: each attempt's start
// (with the time the job waited since it became available) and its
// outcome (AttemptOutcome) and duration, jobs finished here, rescue passes
// and webhook deliveries (the submits are the API's: jobsapi.Observer). The server's Prometheus adapter implements it; the
// runtime itself knows nothing of Prometheus.
//
// # Webhooks
//
// A job with a webhook_url owes one webhook each time it finishes. The
// store writes that delivery into its outbox in the same transaction that
// finishes the job (whatever finishes it: a worker, a cancel, the
// rescuer), and webhookSender POSTs it from there: the JSON of the job
// (jobsapi.JobView, as GET /v1/jobs/{id}?include=request answers it),
// with the Standard Webhooks headers webhook-id (the delivery's stable id,
// the same on every attempt), webhook-timestamp and webhook-signature, plus
// the legacy X-Sluice-Signature, retried with full-jitter backoff until
// Config.Webhooks.RetryFor has passed, then marked failed. Delivery is at
// least once: a receiver deduplicates by webhook-id.
package jobs

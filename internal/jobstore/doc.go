// Package jobstore is Sluice's durable job queue: the job model and its state
// machine, the Store seam every backend implements, the SQLite and
// PostgreSQL backends, their embedded migrations, and the maintenance
// services (JobRescuer, JobCleaner) that keep a store healthy.
//
// # State machine
//
//	          Insert / CreateBatch
//	                  │
//	                  ▼
//	┌──────────────► queued ◄───────────────┐
//	│ Fail(Reschedule)  │ Claim (lease)     │ Rescue (lease expired,
//	│ Fail(Retry)       ▼                   │ stalls+1 ≤ MaxStalls)
//	└──────────────── running ──────────────┘
//	   Complete │       │ Fail(Terminal), attempts/deadline/stalls exhausted
//	            ▼       ▼
//	      succeeded    dead ──Requeue──► queued
//
// Any queued or running job may be canceled (state canceled). Finished jobs
// (succeeded, dead, canceled) are deleted by DeleteFinished after their
// retention period.
//
// # Leases and fencing
//
// Claim moves a job to running and gives it a Lease: an owner, an expiry and
// a fencing token that grows with every claim of that job. Heartbeat,
// Complete and Fail must present the token; once the job has been rescued,
// canceled or claimed again, the old token is refused with ErrLeaseLost, so a
// worker that lost its lease can never overwrite a newer attempt.
//
// # Time
//
// Every method that depends on time takes Now in its params, so tests and
// the maintenance services move time with a fake clock.
package jobstore

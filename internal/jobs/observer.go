package jobs

import (
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Observer receives the job runtime's events, for metrics (the server's
// Prometheus adapter implements it, and jobsapi.Observer for the API's
// submits). Every method must be O(1) and never block: they are called by
// workers between store calls and by the API's cancels. Events count what this process did: with several gateways on
// one PostgreSQL queue, each reports its own share. Embed NopObserver to
// implement only some.
type Observer interface {
	// Started: a worker began an attempt of a job of upstream that had
	// waited queueWait since it became available (its AvailableAt: the
	// submit, or the end of its last backoff).
	Started(upstream string, queueWait time.Duration)
	// Attempted: that attempt ended with outcome after d (from its start to
	// its result recorded).
	Attempted(upstream string, outcome AttemptOutcome, d time.Duration)
	// Finished: n jobs of upstream reached a finished state here: a worker
	// recorded their success or death, or the API canceled them. Jobs the
	// rescuer kills are counted by Rescued instead.
	Finished(upstream string, state jobstore.State, n int)
	// Rescued: a pass of this process's lease rescuer ended (res counts
	// what it did; it may be all zeros).
	Rescued(res jobstore.RescueResult)
	// Webhook: one webhook delivery attempt ended with outcome.
	Webhook(outcome WebhookOutcome)
	// BatchGroup: a group of jobs routed to upstream's Batch API moved
	// on (event), n its jobs.
	BatchGroup(upstream string, event BatchGroupEvent, n int)
	// BatchLines: n lines of a provider batch of upstream were written
	// back with outcome.
	BatchLines(upstream string, outcome BatchLineOutcome, n int)
	// BatchSpend: a line answered through upstream's Batch API was
	// charged batchUSD, where the synchronous path would have cost
	// standardUSD.
	BatchSpend(upstream string, batchUSD, standardUSD float64)
}

// BatchGroupEvent is what happened to a group routed to a provider's
// Batch API.
type BatchGroupEvent string

// The group events.
const (
	// BatchGroupFormed: jobs were chosen and leased to a new group.
	BatchGroupFormed BatchGroupEvent = "formed"
	// BatchGroupSubmitted: the provider accepted the group's batch.
	BatchGroupSubmitted BatchGroupEvent = "submitted"
	// BatchGroupRefused: the provider refused it for its queue limits;
	// its jobs went back to the queue.
	BatchGroupRefused BatchGroupEvent = "refused"
	// BatchGroupPulledBack: canceled at the provider because a job's
	// deadline came near.
	BatchGroupPulledBack BatchGroupEvent = "pulled_back"
	// BatchGroupEnded: every line was written back.
	BatchGroupEnded BatchGroupEvent = "ended"
)

// BatchGroupEvents lists every group event.
var BatchGroupEvents = []BatchGroupEvent{BatchGroupFormed, BatchGroupSubmitted, BatchGroupRefused, BatchGroupPulledBack, BatchGroupEnded}

// BatchLineOutcomes lists every line outcome.
var BatchLineOutcomes = []BatchLineOutcome{LineSucceeded, LineErrored, LineCanceled, LineExpired}

// AttemptOutcome is how one attempt of a job ended.
type AttemptOutcome string

// The attempt outcomes.
const (
	// AttemptSuccess: the provider answered 2xx and the job succeeded.
	AttemptSuccess AttemptOutcome = "success"
	// AttemptRateLimited: the provider answered with a rate limit; the
	// job was requeued at its hint with one attempt burnt.
	AttemptRateLimited AttemptOutcome = "rate_limited"
	// AttemptHeld: nothing was sent: its client's own limit or budget held
	// the call back, or its real cost did not fit the quota now; the job
	// was requeued for when it may go, without burning an attempt (and,
	// for its client's limit, without an entry in its history).
	AttemptHeld AttemptOutcome = "held"
	// AttemptRetry: overload, transient or stream failure; the job was
	// requeued with backoff, one attempt burnt.
	AttemptRetry AttemptOutcome = "retry"
	// AttemptFellBack: overload, transient or stream failure on an
	// upstream with a fallback that could take the job now: one attempt
	// burnt, and the job's call made again at once on the fallback, under
	// the same lease (its next attempt is counted on its own).
	AttemptFellBack AttemptOutcome = "fell_back"
	// AttemptDead: a terminal error (quota, client error, too large), or
	// the job's attempts or deadline ran out; the job is dead.
	AttemptDead AttemptOutcome = "dead"
	// AttemptLeaseLost: the store refused the attempt's result: the lease
	// expired and the rescuer took the job back, or another gateway
	// canceled the job, or it was deleted; the result was dropped.
	AttemptLeaseLost AttemptOutcome = "lease_lost"
	// AttemptCanceled: the job was canceled through this gateway's API
	// during the attempt.
	AttemptCanceled AttemptOutcome = "canceled"
	// AttemptStopped: the gateway (or the upstream's dispatcher) stopped
	// during the attempt; the job was handed back without burning an
	// attempt.
	AttemptStopped AttemptOutcome = "stopped"
	// AttemptStoreError: the result could not be written to the store; the
	// job stays leased until the rescuer takes it back.
	AttemptStoreError AttemptOutcome = "store_error"
)

// AttemptOutcomes lists every attempt outcome.
var AttemptOutcomes = []AttemptOutcome{AttemptSuccess, AttemptRateLimited, AttemptHeld, AttemptRetry, AttemptFellBack, AttemptDead,
	AttemptLeaseLost, AttemptCanceled, AttemptStopped, AttemptStoreError}

// WebhookOutcome is how one webhook POST ended. Every POST this gateway
// starts counts once.
type WebhookOutcome string

// The webhook outcomes.
const (
	// WebhookDelivered: the receiver answered 2xx.
	WebhookDelivered WebhookOutcome = "delivered"
	// WebhookFailed: the receiver refused or could not be reached; the
	// delivery is retried after a backoff.
	WebhookFailed WebhookOutcome = "failed"
	// WebhookGaveUp: the POST failed at the end of the delivery's retry
	// window (Config.Webhooks.RetryFor); the delivery is marked failed.
	WebhookGaveUp WebhookOutcome = "gave_up"
	// WebhookAbandoned: the POST was cut off by this gateway's shutdown;
	// the delivery is due again at once, for the next gateway to send.
	WebhookAbandoned WebhookOutcome = "abandoned"
)

// WebhookOutcomes lists every webhook outcome.
var WebhookOutcomes = []WebhookOutcome{WebhookDelivered, WebhookFailed, WebhookGaveUp, WebhookAbandoned}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Started(string, time.Duration)                   {}
func (NopObserver) Attempted(string, AttemptOutcome, time.Duration) {}
func (NopObserver) Finished(string, jobstore.State, int)            {}
func (NopObserver) Rescued(jobstore.RescueResult)                   {}
func (NopObserver) Webhook(WebhookOutcome)                          {}
func (NopObserver) BatchGroup(string, BatchGroupEvent, int)         {}
func (NopObserver) BatchLines(string, BatchLineOutcome, int)        {}
func (NopObserver) BatchSpend(string, float64, float64)             {}

package jobstore

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// Sentinel errors. Backends map their own errors to these at the edge, so
// callers branch with errors.Is and never see a driver type.
var (
	// ErrNotFound means no job or batch has the given id.
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost means the caller's lease token is no longer the job's:
	// the job was rescued, canceled or claimed again.
	ErrLeaseLost = errors.New("lease lost")
	// ErrConflict means the job or batch is not in a state that allows the
	// operation (cancel a finished job, requeue a live one, reuse an id).
	ErrConflict = errors.New("conflict")
	// ErrInvalid means the params are malformed; the message names the field.
	ErrInvalid = errors.New("invalid")
	// ErrSchemaTooNew means the database was migrated by a newer Sluice
	// than this one; the server refuses to start on it.
	ErrSchemaTooNew = errors.New("database schema is newer than this sluice")
	// ErrNoStore: the store an address names does not exist yet (a SQLite
	// file never created). OpenMigrator returns it with ExistingStore, so
	// that a read does not create the file.
	ErrNoStore = errors.New("no store")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable means the store cannot answer now: its server is
	// unreachable (connection refused or reset, pool timeout), its disk is
	// full, it is read-only, or its lock stayed held past BusyTimeout. The
	// operation did not happen (or, for a lost commit acknowledgement, may
	// have: fenced writes are safe to retry). Callers answer it as an
	// outage (503, retry later); the wrapped error keeps the driver's
	// detail for the log.
	ErrUnavailable = errors.New("job store unavailable")
)

// Store is the durable job store. The job runtime, the HTTP API, the CLI
// and the maintenance services use it; SQLite and PostgreSQL implement it
// and jobstoretest.Run checks that they behave the same. All methods are safe
// for concurrent use.
type Store interface {
	// Insert adds a queued job. When IdempotencyKey names an existing job
	// of the same Client (keys are scoped per client), that job is returned
	// with Existing set and nothing is inserted.
	Insert(ctx context.Context, p InsertParams) (InsertResult, error)
	// Get returns a job by id, or ErrNotFound.
	Get(ctx context.Context, id int64) (*Job, error)
	// List returns jobs in id order after a cursor, filtered.
	List(ctx context.Context, p ListParams) (JobPage, error)

	// Claim leases up to Limit queued jobs whose time has come, skipping
	// paused upstreams and jobs past their deadline, in order of priority,
	// then AvailableAt, then id.
	Claim(ctx context.Context, p ClaimParams) ([]*Job, error)
	// Heartbeat extends a lease. ErrLeaseLost when the token is stale.
	Heartbeat(ctx context.Context, p HeartbeatParams) error
	// Complete marks a running job succeeded with its result.
	// ErrLeaseLost when the token is stale.
	Complete(ctx context.Context, p CompleteParams) error
	// CompleteSpooled completes a job with a result its worker kept while
	// the store could not be reached (the runtime's spool). With the
	// lease's token still current it is Complete. When the lease was lost
	// meanwhile (the rescuer requeued the job, or another worker claimed it
	// with a later token) and the job is still live, it completes the job
	// all the same: the answer was paid for, and the job must not be
	// called again. ErrConflict when the job finished since (succeeded,
	// dead or canceled), ErrNotFound when it is gone.
	CompleteSpooled(ctx context.Context, p CompleteParams) error
	// Fail records a failed attempt and requeues the job or kills it,
	// returning the state it ended in. ErrLeaseLost when the token is stale.
	Fail(ctx context.Context, p FailParams) (State, error)
	// RecordAttempt records a failed attempt of a running job whose lease
	// goes on: the attempt burns and joins the history, and the job stays
	// running, because its worker makes its call again at once elsewhere
	// (a fallback of an upstream in an outage). ErrLeaseLost when the
	// token is stale, ErrConflict when the job has no attempt left after
	// it (the caller fails the job instead).
	RecordAttempt(ctx context.Context, p RecordAttemptParams) error

	// Cancel cancels a queued or running job. Canceling a canceled job is a
	// no-op; canceling a succeeded or dead one is ErrConflict.
	Cancel(ctx context.Context, p CancelParams) (CancelResult, error)
	// Requeue moves dead jobs back to queued with fresh attempts and
	// stalls, and returns how many moved.
	Requeue(ctx context.Context, p RequeueParams) (int, error)
	// Rescue takes back running jobs whose lease expired (queued with
	// stalls+1, or dead past MaxStalls) and kills queued jobs past their
	// deadline.
	Rescue(ctx context.Context, p RescueParams) (RescueResult, error)
	// DeleteFinished deletes up to Limit jobs in a finished state that
	// finished before a time, and returns how many.
	DeleteFinished(ctx context.Context, p DeleteFinishedParams) (int, error)

	// SetPaused pauses or resumes an upstream's queue: Claim skips paused
	// upstreams.
	SetPaused(ctx context.Context, p PauseParams) error
	// PausedUpstreams lists the paused upstreams in name order.
	PausedUpstreams(ctx context.Context) ([]string, error)

	// CreateBatch inserts a batch and all its jobs in one transaction.
	CreateBatch(ctx context.Context, p CreateBatchParams) (*Batch, error)
	// GetBatch returns a batch with its counts per state, or ErrNotFound.
	GetBatch(ctx context.Context, id string) (*Batch, error)
	// ListBatches returns the newest batches first, with their counts.
	ListBatches(ctx context.Context, p ListBatchesParams) ([]*Batch, error)
	// BatchJobs returns a batch's jobs in CustomID order after a cursor.
	BatchJobs(ctx context.Context, p BatchJobsParams) (BatchPage, error)
	// CancelBatch cancels every live job of a batch, and dates the first
	// cancel asked for (Batch.CancelRequestedAt).
	CancelBatch(ctx context.Context, p CancelBatchParams) (CancelBatchResult, error)
	// CancelRun cancels every live job of a run (of its Client, when
	// set). ErrNotFound when the run has no job (of that client).
	CancelRun(ctx context.Context, p CancelRunParams) (CancelRunResult, error)
	// DeleteBatch deletes an ended batch and its jobs (their webhook
	// deliveries with them). ErrNotFound when there is no such batch,
	// ErrConflict while a job of it is queued or running.
	DeleteBatch(ctx context.Context, id string) error

	// CreateFile stores an uploaded file (file.go).
	CreateFile(ctx context.Context, p CreateFileParams) (*File, error)
	// GetFile returns a file, with its content when p.Content is set, or
	// ErrNotFound.
	GetFile(ctx context.Context, p GetFileParams) (*File, error)
	// ListFiles returns files without their content, newest first.
	ListFiles(ctx context.Context, p ListFilesParams) ([]*File, error)
	// DeleteFile deletes a file. ErrNotFound when there is none.
	DeleteFile(ctx context.Context, id string) error

	// ClaimDeliveries leases up to Limit pending webhook deliveries due at
	// Now, oldest due first: each gets a new Token, one more Attempt, and
	// NextAttemptAt moved to Now+LeaseFor so no other claimer takes it
	// while its POST runs (PostgreSQL: FOR UPDATE SKIP LOCKED). A claimer
	// that dies leaves it due again when the lease ends.
	ClaimDeliveries(ctx context.Context, p ClaimDeliveriesParams) ([]*WebhookDelivery, error)
	// RecordDelivery writes a claimed attempt's result. ErrLeaseLost when
	// the token is stale (redelivered or claimed again meanwhile),
	// ErrNotFound when the delivery is gone.
	RecordDelivery(ctx context.Context, p RecordDeliveryParams) error
	// Deliveries returns a job's webhook deliveries, oldest first (none
	// for a job without a webhook_url or not finished yet).
	Deliveries(ctx context.Context, jobID int64) ([]*WebhookDelivery, error)
	// BatchDeliveries returns a batch's webhook deliveries, oldest first
	// (none for a batch without a webhook URL or not ended yet).
	BatchDeliveries(ctx context.Context, batchID string) ([]*WebhookDelivery, error)
	// Redeliver makes the job's latest delivery pending and due at once,
	// with the same ID, and returns it. ErrNotFound when the job has no
	// delivery.
	Redeliver(ctx context.Context, p RedeliverParams) (*WebhookDelivery, error)
	// DeliveryStats counts the pending deliveries and dates the oldest.
	DeliveryStats(ctx context.Context) (DeliveryStats, error)

	// Notify returns a channel that receives (coalesced, never blocking the
	// store) when work may have become available for upstream ("" for any
	// upstream): an insert, a requeue, a reschedule or a rescue. It is
	// closed when ctx is done. Jobs scheduled for later are not signaled
	// when their time comes: combine Notify with NextAvailable or a poll.
	Notify(ctx context.Context, upstream string) <-chan struct{}
	// Handoff registers a local worker that takes jobs leased at insert
	// while it is idle (see Handoff). Close it when the worker stops.
	Handoff(p HandoffParams) (*Handoff, error)
	// Backlog counts the queued jobs of upstream that Claim could take at
	// now (available, not past their deadline), per priority class, each count capped at limit (at least 1): it tells a
	// worker which classes have work without reading more than limit index
	// entries per class. A paused upstream has none.
	Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error)
	// NextAvailable returns the earliest AvailableAt among queued jobs of
	// upstream ("" for any); ok is false when nothing is queued.
	NextAvailable(ctx context.Context, upstream string) (at time.Time, ok bool, err error)
	// CountLive counts the live jobs of every upstream that has one, in
	// upstream order: queued (and of those, the ones not available before
	// now) and running. It reads only live jobs, through the partial
	// indexes of queued jobs (index-only) and of running ones (and their
	// rows, for the upstream), so finished jobs cost nothing; its cost grows
	// with the queued jobs (one index entry each), so callers should cache
	// it.
	CountLive(ctx context.Context, now time.Time) ([]LiveCount, error)

	// AddSpend adds each entry's spend to what its client spent on its
	// upstream and model on its UTC day, all in one transaction.
	AddSpend(ctx context.Context, p AddSpendParams) error
	// Spend returns the spend recorded per client, UTC day, upstream and
	// model, from Since's day on (all of it for a zero Since), in that
	// order.
	Spend(ctx context.Context, p SpendParams) ([]SpendEntry, error)
	// WriteSpendHolds opens, settles and renews one owner's spend holds
	// (spend_hold.go) in one transaction.
	WriteSpendHolds(ctx context.Context, p WriteSpendHoldsParams) error
	// SpendHolds returns the holds open, by owner and seq.
	SpendHolds(ctx context.Context, p SpendHoldsParams) ([]SpendHold, error)
	// ReapSpendHolds charges the holds of owners that are gone at their
	// worst case on Now's UTC day and deletes them, in one transaction;
	// it returns what it charged, per client, upstream and model
	// (Requests: the holds). Concurrent reapers charge each hold once.
	ReapSpendHolds(ctx context.Context, p ReapSpendHoldsParams) ([]SpendEntry, error)

	// CreateClient creates a runtime client (client.go). ErrConflict when
	// a client of that name exists (a revoked one may be created again).
	CreateClient(ctx context.Context, p CreateClientParams) (*StoredClient, error)
	// UpdateClient replaces a runtime client's settings and keys.
	// ErrNotFound when there is none, ErrConflict when IfVersion is stale.
	UpdateClient(ctx context.Context, p UpdateClientParams) (*StoredClient, error)
	// DeleteClient revokes a runtime client: its keys stop working on
	// every gateway once they read the change. ErrNotFound when there is
	// none.
	DeleteClient(ctx context.Context, p DeleteClientParams) error
	// GetClient returns a runtime client, or ErrNotFound.
	GetClient(ctx context.Context, name string) (*StoredClient, error)
	// ListClients returns every runtime client in name order.
	ListClients(ctx context.Context) ([]*StoredClient, error)
	// ClientsVersion is a number that changes with every write of a
	// runtime client (the sum of their versions, revoked ones included):
	// a gateway polls it and reads ListClients again when it changes.
	ClientsVersion(ctx context.Context) (int64, error)

	// PutResponseKey records which key created a stored Response
	// (response_key.go), replacing an earlier record of its id.
	PutResponseKey(ctx context.Context, p PutResponseKeyParams) error
	// GetResponseKey returns the record of a Response that has not
	// expired at Now, or ErrNotFound.
	GetResponseKey(ctx context.Context, p GetResponseKeyParams) (ResponseKey, error)
	// DeleteResponseKeys deletes up to Limit records expired at Now, and
	// returns how many.
	DeleteResponseKeys(ctx context.Context, p DeleteResponseKeysParams) (int, error)
	// CreateGroup chooses queued jobs for a provider batch and leases them
	// to a new group in one transaction, when enough of them wait or the
	// oldest waited long enough (provider_group.go); no group otherwise.
	CreateGroup(ctx context.Context, p CreateGroupParams) (CreateGroupResult, error)
	// LeaseGroups renews the leases of the open groups of an upstream that
	// the owner holds and takes those whose lease expired (token+1), in
	// creation order. On PostgreSQL concurrent leasers skip each other's
	// rows: a group is held by one router at a time.
	LeaseGroups(ctx context.Context, p LeaseGroupsParams) ([]*Group, error)
	// UpdateGroup moves a group on (state, provider id, submit time),
	// fenced by its lease token: ErrLeaseLost when stale, ErrNotFound when
	// there is no such group.
	UpdateGroup(ctx context.Context, p UpdateGroupParams) (*Group, error)
	// GroupMembers returns a group's jobs in id order.
	GroupMembers(ctx context.Context, id string) ([]GroupMember, error)
	// FinishGroupLines writes lines of a group back to their jobs, fenced
	// by the group's token, each once: the job's new state (if the group
	// still holds it) and the line's spend, in one transaction; a line
	// written before is skipped. The group ends with its last line.
	FinishGroupLines(ctx context.Context, p FinishGroupLinesParams) (FinishGroupLinesResult, error)

	// Close releases the store's connections and goroutines.
	Close() error
}

// InsertParams describes a new job.
type InsertParams struct {
	// IdempotencyKey makes the insert idempotent when set; it is unique
	// per Client.
	IdempotencyKey string
	// Upstream is required.
	Upstream string
	// Priority must be valid (0..3).
	Priority llm.Priority
	// Client owns the job (free text): it scopes IdempotencyKey.
	Client string
	// Path is required, e.g. /v1/messages.
	Path string
	// Body is the provider request body.
	Body []byte
	// Deadline is optional (zero for none).
	Deadline time.Time
	// MaxAttempts must be at least 1.
	MaxAttempts int
	// AvailableAt is when the job may first run; zero means Now.
	AvailableAt time.Time
	// CustomID identifies the job inside its batch (CreateBatch) or its
	// run (Insert with RunID).
	CustomID string
	// RunID puts the job in a run (Job.RunID): at most MaxRunIDLen bytes;
	// empty for none. Insert only (a batch's jobs belong to their batch).
	RunID string
	// WebhookURL is optional.
	WebhookURL string
	// Dead, on a job of CreateBatch, inserts it already dead with this
	// error, never to be sent: a request refused before it could run (a
	// provider batch's request whose params the provider refuses), kept
	// so that it answers as the batch's errored result. DeadResult is the
	// error answer it keeps (the provider's error body), nil for none.
	// Insert refuses it; a dead job takes no WebhookURL. Defaults to a
	// queued job.
	Dead       *AttemptError
	DeadResult *Result
	// Now is the insertion time.
	Now time.Time
}

// MaxRunIDLen bounds InsertParams.RunID.
const MaxRunIDLen = 128

// InsertResult is the job inserted, or the one that already had the key.
type InsertResult struct {
	Job *Job
	// Existing is true when the idempotency key matched an earlier job.
	Existing bool
}

// ListParams filters and pages List. Empty filters match everything.
type ListParams struct {
	State    State
	Upstream string
	Client   string
	BatchID  string
	RunID    string
	// After is the cursor (a JobPage.Next): only jobs after it in the
	// page order, a larger id (a smaller one with NewestFirst). Zero
	// starts at the beginning.
	After int64
	// NewestFirst lists the newest jobs (the largest ids) first. Defaults
	// to false: the oldest first.
	NewestFirst bool
	// Limit is the page size; zero means ListLimitDefault, and it is capped
	// at ListLimitMax.
	Limit int
}

// Page sizes for List and BatchJobs.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
)

// JobPage is one page of jobs. Next is the cursor for the following page,
// zero when this is the last.
type JobPage struct {
	Jobs []*Job
	Next int64
}

// ClaimParams asks for work.
type ClaimParams struct {
	// Upstream limits the claim to one upstream; empty claims any
	// non-paused upstream.
	Upstream string
	// Priority, when not nil, claims only jobs of that class.
	Priority *llm.Priority
	// Limit is how many jobs at most; at least 1.
	Limit int
	// DeadlineBy, when set, claims only jobs with a deadline at or before
	// it: the jobs of a class routed to a provider's Batch API that are
	// too near their deadline to be routed (provider_group.go).
	DeadlineBy time.Time
	// Owner names the worker.
	Owner string
	// LeaseFor is how long the lease lasts without a heartbeat; positive.
	LeaseFor time.Duration
	// Now is the claim time.
	Now time.Time
}

// HeartbeatParams extends a lease to Now+LeaseFor.
type HeartbeatParams struct {
	ID       int64
	Token    int64
	LeaseFor time.Duration
	Now      time.Time
}

// RecordAttemptParams records a failed attempt of a running job that goes
// on under the same lease.
type RecordAttemptParams struct {
	ID    int64
	Token int64
	// Error is appended to the job's history (Attempt and At are filled
	// in by the store when zero).
	Error AttemptError
	Now   time.Time
}

// CompleteParams finishes a running job with success.
type CompleteParams struct {
	ID     int64
	Token  int64
	Result Result
	Now    time.Time
}

// FailParams records a failed attempt.
type FailParams struct {
	ID    int64
	Token int64
	// Kind says whether the attempt burns and whether the job may retry.
	Kind FailKind
	// Error is appended to the job's history (Attempt and At are filled in
	// by the store when zero). A FailReschedule with an empty Error (no
	// Kind, Status or Message) adds nothing: a job handed back before its
	// call has no entry.
	Error AttemptError
	// RetryAt is when a rescheduled or retried job is available again;
	// zero means Now. A RetryAt past the job's deadline kills the job.
	RetryAt time.Time
	// Result is the provider's error response, kept when the job dies;
	// optional.
	Result *Result
	Now    time.Time
}

// CancelParams cancels one job.
type CancelParams struct {
	ID  int64
	Now time.Time
}

// CancelResult tells the runtime whether it must abort an in-flight call.
type CancelResult struct {
	Job *Job
	// WasLive is true when this call canceled the job (it was queued or
	// running); false when the job was already canceled.
	WasLive bool
	// WasRunning is true when the job was running: its worker should
	// abort the provider call (its lease is now lost).
	WasRunning bool
}

// RequeueParams selects dead jobs to requeue: by IDs, or by the filters
// (Upstream, BatchID; both empty with All set means every dead job).
type RequeueParams struct {
	IDs      []int64
	Upstream string
	BatchID  string
	All      bool
	// Client, when set, requeues only that client's jobs (ownership).
	Client string
	Now    time.Time
}

// RescueParams drives one rescuer pass.
type RescueParams struct {
	// MaxStalls is how many stalls a job survives; one more kills it.
	MaxStalls int
	// Limit bounds the jobs touched in one pass; zero means
	// RescueLimitDefault.
	Limit int
	Now   time.Time
}

// RescueLimitDefault is the default batch size of a rescue or cleaner pass.
const RescueLimitDefault = 1000

// RescueResult counts what one rescue pass did.
type RescueResult struct {
	// Requeued jobs had an expired lease and stalls left.
	Requeued int
	// Dead jobs had an expired lease and no stalls left.
	Dead int
	// Expired jobs were queued past their deadline and are now dead.
	Expired int
}

// LiveCount counts one upstream's live jobs.
type LiveCount struct {
	Upstream string
	// Queued counts the queued jobs, Delayed included.
	Queued int
	// Delayed counts the queued jobs whose AvailableAt is after the count's
	// now: waiting out a retry backoff or a rate-limit hint.
	Delayed int
	// Running counts the leased jobs.
	Running int
}

// DeleteFinishedParams deletes old finished jobs of one state.
type DeleteFinishedParams struct {
	// State must be succeeded, dead or canceled.
	State State
	// Before: jobs that finished strictly before this time are deleted,
	// but for the jobs of a batch kept until after Now
	// (CreateBatchParams.KeepUntil). A batch left without jobs goes too
	// once created before Before and not kept past Now.
	Before time.Time
	// Now is the time of the pass; zero keeps every kept batch's jobs.
	Now time.Time
	// Limit bounds one call; zero means RescueLimitDefault.
	Limit int
}

// PauseParams pauses or resumes one upstream.
type PauseParams struct {
	Upstream string
	Paused   bool
	Now      time.Time
}

// ListBatchesParams selects batches for ListBatches.
type ListBatchesParams struct {
	// Client keeps only this client's batches; empty means every client's.
	Client string
	// Upstream keeps only the batches created on this upstream
	// (CreateBatchParams.Upstream); empty means all.
	Upstream string
	// After is a batch id: only batches older than it (the next page,
	// newest first). Before is a batch id: only batches newer than it,
	// the Limit nearest to it (the previous page), still newest first.
	// An id that does not exist gives no batch. At most one may be set.
	After, Before string
	// Limit bounds the batches returned, in [1, ListLimitMax]; 0 means
	// ListLimitDefault.
	Limit int
}

// limit is p.Limit within its bounds.
func (p ListBatchesParams) limit() int {
	if p.Limit <= 0 {
		return ListLimitDefault
	}
	return min(p.Limit, ListLimitMax)
}

// Batch is a set of jobs created together.
type Batch struct {
	ID string
	// Format is the protocol of the batch's source file.
	Format llm.Protocol
	// Total is the number of jobs.
	Total int
	// Client owns the batch (CreateBatchParams.Client).
	Client    string
	Counts    BatchCounts
	CreatedAt time.Time
	// Upstream, Attrs and KeepUntil are CreateBatchParams'.
	Upstream  string
	Attrs     []byte
	KeepUntil time.Time
	// CancelRequestedAt is when a cancel was first asked for; zero if never.
	CancelRequestedAt time.Time
	// WebhookURL is CreateBatchParams.WebhookURL.
	WebhookURL string
	// EndedAt is when the last of its jobs finished, once every job has
	// (the batch's creation for a batch without jobs); zero before.
	EndedAt time.Time
}

// Ended reports whether every job of the batch is finished.
func (b *Batch) Ended() bool { return b.Counts.Queued == 0 && b.Counts.Running == 0 }

// BatchCounts counts a batch's jobs per state.
type BatchCounts struct {
	Queued, Running, Succeeded, Dead, Canceled int
}

// CreateBatchParams describes a batch and its jobs.
type CreateBatchParams struct {
	// ID is the batch id; empty lets the store make one ("batch_" + hex).
	ID string
	// Format is the protocol of the source (anthropic or openai).
	Format llm.Protocol
	// Client owns the batch; empty for none.
	Client string
	// Upstream is the upstream the batch was created on, for listing by
	// upstream; empty for none.
	Upstream string
	// Attrs are kept as they are for the API (a provider batch's own
	// fields, as JSON); nil for none.
	Attrs []byte
	// KeepUntil keeps the batch and its finished jobs until then, whatever
	// the cleaner's retention of their states; zero for no such keep.
	KeepUntil time.Time
	// WebhookURL, when set, is owed a delivery (the batch's completion
	// webhook) each time the batch ends: in the transaction that finishes
	// its last job (batch.completed, batch.expired, batch.cancelled), or
	// in CreateBatch for a batch without jobs (batch.failed). Empty for
	// none.
	WebhookURL string
	// Jobs are inserted as given, each with a CustomID unique in the batch.
	Jobs []InsertParams
	// AllowEmpty lets a batch have no job (a provider batch refused at
	// validation, kept so that it can be read).
	AllowEmpty bool
	Now        time.Time
}

// BatchJobsParams pages a batch's jobs in CustomID order.
type BatchJobsParams struct {
	BatchID string
	// After is the last CustomID of the previous page; empty starts.
	After string
	// Limit as in ListParams.
	Limit int
}

// BatchPage is one page of a batch's jobs. Next is the cursor for the next
// page, empty when this is the last.
type BatchPage struct {
	Jobs []*Job
	Next string
}

// CancelBatchParams cancels a batch's live jobs.
type CancelBatchParams struct {
	BatchID string
	Now     time.Time
}

// CancelBatchResult counts canceled jobs and names the running ones, whose
// calls the runtime should abort.
type CancelBatchResult struct {
	Canceled int
	Running  []int64
}

// CancelRunParams cancels a run's live jobs.
type CancelRunParams struct {
	RunID string
	// Client limits the cancel to that client's jobs of the run; empty
	// means every client's (an admin's cancel).
	Client string
	Now    time.Time
}

// CancelRunResult counts the jobs CancelRun canceled per upstream and
// names the running ones, whose calls the runtime aborts.
type CancelRunResult struct {
	Canceled map[string]int
	// Running is in id order.
	Running []int64
}

// Total is how many jobs were canceled.
func (r CancelRunResult) Total() int {
	n := 0
	for _, c := range r.Canceled {
		n += c
	}
	return n
}

package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

// BatchAPI is a provider's Batch API as the batch router uses it
// (Anthropic's Message Batches, OpenAI's Files and Batches): one adapter
// per upstream, which speaks the provider's wire format with the
// upstream's key. Defined here, by its consumer.
type BatchAPI interface {
	// Create submits lines as one provider batch; tag is the group's id,
	// kept with the batch where the provider allows (OpenAI's metadata) so
	// that Find can recognise it.
	Create(ctx context.Context, tag string, lines []BatchLine) (ProviderBatch, error)
	// Get reads a batch's status.
	Get(ctx context.Context, id string) (ProviderBatch, error)
	// Results reads an ended batch's lines, each once.
	Results(ctx context.Context, id string) ([]BatchLineResult, error)
	// Cancel asks the provider to cancel a batch; it ends (canceled) with
	// the lines done so far.
	Cancel(ctx context.Context, id string) error
	// Find looks for the batch of a create whose answer was lost (to a
	// crash, a timeout): found false when the provider has none, so the
	// lines may be sent again; ErrBatchUndecided when a batch that may be
	// it cannot be told apart yet (ask again later).
	Find(ctx context.Context, q BatchQuery) (b ProviderBatch, found bool, err error)
}

// BatchQuery describes a create whose answer was lost.
type BatchQuery struct {
	// Tag is the tag the create carried (the group's id).
	Tag string
	// Since is when the create was first sent (on Sluice's clock): the
	// batch, if any, was made after it.
	Since time.Time
	// Lines are the lines it carried.
	Lines []BatchLine
}

// Errors a BatchAPI answers with.
var (
	// ErrBatchQueueFull: the provider refused the batch for its queue
	// limits (queued requests, enqueued tokens); the router halves the
	// groups it sends to the upstream and tries again later: once the
	// provider's retry hint has passed when the error carries one (in
	// its chain, a RetryAfter() (time.Duration, bool) method, as
	// *batches.Error has).
	ErrBatchQueueFull = errors.New("provider batch queue full")
	// ErrBatchNotFound: the provider has no such batch (deleted, or its
	// retention ran out).
	ErrBatchNotFound = errors.New("provider batch not found")
	// ErrBatchRefused: the provider refused the batch whole for its
	// content (a malformed line, a body it does not take): nothing was
	// queued. The router halves its groups; a refused group of one line
	// kills its job with the provider's error (a *BatchRefusalError).
	ErrBatchRefused = errors.New("provider batch refused")
	// ErrBatchUndecided: Find saw a batch that may be the one sought but
	// cannot tell yet (Anthropic batches show their lines only once
	// ended); the router asks again on its next turn.
	ErrBatchUndecided = errors.New("provider batch not identified yet")
)

// BatchRefusalError is the provider's refusal of a whole batch; it wraps
// ErrBatchRefused.
type BatchRefusalError struct {
	// Status and Body are the provider's answer, in its protocol's error
	// shape: what a refused one-line group's job ends with.
	Status int
	Body   []byte
	Err    error
}

func (e *BatchRefusalError) Error() string { return e.Err.Error() }

// Unwrap returns ErrBatchRefused and the provider's error.
func (e *BatchRefusalError) Unwrap() []error { return []error{ErrBatchRefused, e.Err} }

// BatchLine is one request of a provider batch.
type BatchLine struct {
	// CustomID identifies the line in the results (the job's id).
	CustomID string
	// Path is the endpoint (/v1/messages, /v1/chat/completions, ...).
	Path string
	// Body is the request body as the job stores it.
	Body []byte
}

// ProviderBatch is a provider batch's status.
type ProviderBatch struct {
	ID string
	// Ended is true once the provider processed, canceled or expired it:
	// its results can be read.
	Ended     bool
	CreatedAt time.Time
}

// BatchLineResult is one line of an ended batch.
type BatchLineResult struct {
	CustomID string
	// Outcome is what became of the line.
	Outcome BatchLineOutcome
	// Status and Body are the line's response (a success's or an
	// error's); Usage the billed usage of a success.
	Status int
	Body   []byte
	Usage  llm.Usage
}

// BatchLineOutcome is how a provider batch's line ended.
type BatchLineOutcome string

// The line outcomes (Anthropic's result types; OpenAI's are mapped onto
// them).
const (
	LineSucceeded BatchLineOutcome = "succeeded"
	// LineErrored: the provider answered the line with an error (a 4xx
	// kills the job, any other status sends it back to the queue).
	LineErrored  BatchLineOutcome = "errored"
	LineCanceled BatchLineOutcome = "canceled"
	LineExpired  BatchLineOutcome = "expired"
	// LineHeld: the line was never sent; the admission layer held its job
	// back (its client's budget, access or service tiers).
	LineHeld BatchLineOutcome = "held"
)

// BatchPricer is the admission layer as the batch router asks it: it
// admits a routed job's line before it is sent (its client's access,
// service tiers and budget, holding the line's worst case at the batch
// price), prices the lines the provider answered, and tells the budgets
// of what the store recorded; *admit.Layer implements it.
type BatchPricer interface {
	// ReserveBatchLine admits req to a provider batch on t; a refusal is
	// an *admit.RefusalError.
	ReserveBatchLine(t admit.Target, req *dispatch.Request) (admit.BatchHold, error)
	// HoldBatchLine holds a line sent before this router held its group.
	HoldBatchLine(protocol llm.Protocol, req *dispatch.Request) admit.BatchHold
	// ReleaseBatchLine gives back the hold of a line not billed.
	ReleaseBatchLine(h admit.BatchHold)
	PriceBatchLine(protocol llm.Protocol, model string, usage llm.Usage) admit.BatchLineCost
	// BatchCharged counts a line's cost the store recorded, settling h.
	BatchCharged(client, upstream string, cost admit.BatchLineCost, h admit.BatchHold)
}

// retryAfterOf is the provider's retry hint carried by err (ErrBatchQueueFull),
// and whether it carries one.
func retryAfterOf(err error) (time.Duration, bool) {
	var hint interface{ RetryAfter() (time.Duration, bool) }
	if !errors.As(err, &hint) {
		return 0, false
	}
	return hint.RetryAfter()
}

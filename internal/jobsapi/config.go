package jobsapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// Defaults for Config fields, and the bounds of what a submitter may ask.
const (
	// MaxAttemptsDefault is a job's MaxAttempts when the submitter names
	// none and the gateway's jobs.max_attempts is unset.
	MaxAttemptsDefault = 6
	// MaxAttemptsMax caps the max_attempts a submitter may ask for (and
	// the gateway's jobs.max_attempts).
	MaxAttemptsMax = 100
	// PriorityDefault is a job's class when the submitter names none.
	PriorityDefault = llm.Low
	// PollIntervalDefault is the longest a long poll waits before reading
	// its job from the store again.
	PollIntervalDefault = time.Second
	// MaxBodyBytesDefault is the largest POST /v1/jobs body: Anthropic's
	// Messages limit (32 MB).
	MaxBodyBytesDefault = 32 << 20
	// MaxBatchBytesDefault is the largest POST /v1/batches body and
	// Message Batches create: Anthropic's Message Batches limit (256 MB).
	MaxBatchBytesDefault = 256 << 20
	// MaxBatchJobsDefault is the most requests in one POST /v1/batches
	// batch or Message Batch (Anthropic's limit).
	MaxBatchJobsDefault = 100_000
	// MaxOpenAIBatchBytesDefault is the largest OpenAI batch input file
	// (a Files upload with purpose batch): OpenAI's limit (200 MB).
	MaxOpenAIBatchBytesDefault = 200 << 20
	// MaxOpenAIBatchJobsDefault is the most requests in one OpenAI
	// batch's input file (OpenAI's limit).
	MaxOpenAIBatchJobsDefault = 50_000
	// MaxLongPollDefault bounds GET /v1/jobs/{id}?wait=.
	MaxLongPollDefault = 60 * time.Second
	// BatchFinalizingDefault is how long an OpenAI batch whose requests
	// have all finished shows "finalizing" before it is "completed".
	BatchFinalizingDefault = time.Second
	// BatchRetentionDefault is how long a provider batch's results are
	// kept after its window (Anthropic's 29 days).
	BatchRetentionDefault = 29 * 24 * time.Hour
)

// Config configures an API.
type Config struct {
	// Store is the durable job store the runtime runs on. Required.
	Store jobstore.Store
	// Runtime runs the jobs (*jobs.Service). Required.
	Runtime Runtime
	// Protocols are the upstreams jobs may name, with their wire
	// protocols. Required: at least one.
	Protocols map[string]llm.Protocol
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// MaxAttempts is a job's attempt budget when the submitter names none
	// (the gateway's jobs.max_attempts), at most MaxAttemptsMax. Defaults
	// to MaxAttemptsDefault.
	MaxAttempts int
	// PollInterval is the longest a long poll waits before reading its job
	// from the store again (a job finished by another gateway wakes no long
	// poll here). Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// MaxBodyBytes is the largest POST /v1/jobs body; larger gets 413.
	// Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int64
	// MaxBatchBytes is the largest POST /v1/batches body and Anthropic
	// Message Batches create; larger gets 413. Defaults to
	// MaxBatchBytesDefault.
	MaxBatchBytes int64
	// MaxBatchJobs is the most lines in one POST /v1/batches batch and
	// the most requests in one Message Batch. Defaults to
	// MaxBatchJobsDefault.
	MaxBatchJobs int
	// MaxOpenAIBatchBytes is the largest file an OpenAI upstream's Files
	// upload takes (a batch input file); larger is refused as OpenAI
	// refuses it (400, "File is too large."). Defaults to
	// MaxOpenAIBatchBytesDefault.
	MaxOpenAIBatchBytes int64
	// MaxOpenAIBatchJobs is the most requests in one OpenAI batch's input
	// file; a batch of more fails its validation (too_many_tasks), as
	// OpenAI's does. Defaults to MaxOpenAIBatchJobsDefault.
	MaxOpenAIBatchJobs int
	// MaxLongPoll bounds GET /v1/jobs/{id}?wait=. Defaults to
	// MaxLongPollDefault.
	MaxLongPoll time.Duration
	// WebhookCheck vets a webhook_url at submit (the gateway refuses
	// private and metadata destinations: webhook.Guard); an error is
	// answered 400 with its text. Defaults to accepting any http(s) URL.
	WebhookCheck func(ctx context.Context, url string) error
	// ClientOf names the submitter of an HTTP request (for fairness and
	// listing). Defaults to the X-Sluice-Client header.
	ClientOf func(r *http.Request) string
	// AdminOf reports whether the caller of r may see and manage every
	// client's jobs and batches, pause upstreams and requeue across
	// clients; any other caller sees only its own (owner.go). Defaults to
	// every caller being an admin (one tenant).
	AdminOf func(r *http.Request) bool
	// PriorityOf returns the class a job submitted by r gets when it asks
	// for requested (e.g. capped at the client's max_priority). Defaults to
	// the requested class.
	PriorityOf func(r *http.Request, requested llm.Priority) llm.Priority
	// Permit asks the admission layer whether client may send to upstream
	// a request for model ("": the upstream alone): admit.Layer.Permit,
	// whose error (the client's allowed upstreams and models) is
	// answered 403 permission_error at submit, before anything is
	// queued. Defaults to permitting every request.
	Permit func(client, upstream, model string) error
	// Logger logs the store failures the API answers as 5xx, an
	// upstream's job queue paused or resumed, and every change an admin
	// makes to jobs (cancel, retry, requeue, a batch's or a run's cancel:
	// "job admin action"). Defaults to slog.Default().
	Logger *slog.Logger
	// Observer receives the API's events for metrics (submits). Defaults
	// to none.
	Observer Observer
	// BatchPriority is the class of the jobs of a provider batch (the
	// providers' own batch APIs, provider.go) per upstream, when the
	// request names none with X-Priority. Defaults to PriorityDefault for
	// an upstream not in it.
	BatchPriority map[string]llm.Priority
	// BatchFinalizing is how long an OpenAI batch whose requests have all
	// finished shows "finalizing" (its output and error files not named
	// yet) before it is "completed", as OpenAI's batches do while their
	// files are written. Defaults to BatchFinalizingDefault.
	BatchFinalizing time.Duration
	// BatchRetention is how long a provider batch and its results are kept
	// after its 24-hour window (BatchWindow), whatever the cleaner's
	// retention of its jobs' states. Defaults to BatchRetentionDefault.
	BatchRetention time.Duration
}

// WithDefaults returns c with every unset field filled in. It is pure.
func (c Config) WithDefaults() Config {
	c.Clock = clock.Or(c.Clock)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, MaxBatchBytesDefault)
	c.MaxBatchJobs = cmp.Or(c.MaxBatchJobs, MaxBatchJobsDefault)
	c.MaxOpenAIBatchBytes = cmp.Or(c.MaxOpenAIBatchBytes, MaxOpenAIBatchBytesDefault)
	c.MaxOpenAIBatchJobs = cmp.Or(c.MaxOpenAIBatchJobs, MaxOpenAIBatchJobsDefault)
	c.MaxLongPoll = cmp.Or(c.MaxLongPoll, MaxLongPollDefault)
	c.BatchRetention = cmp.Or(c.BatchRetention, BatchRetentionDefault)
	c.BatchFinalizing = cmp.Or(c.BatchFinalizing, BatchFinalizingDefault)
	if c.PriorityOf == nil {
		c.PriorityOf = func(_ *http.Request, p llm.Priority) llm.Priority { return p }
	}
	if c.AdminOf == nil {
		c.AdminOf = func(*http.Request) bool { return true }
	}
	if c.ClientOf == nil {
		c.ClientOf = func(r *http.Request) string { return r.Header.Get(frontdoor.HeaderClient) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c
}

// Validate reports the first invalid field of c once defaulted, by its Go
// name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Store == nil:
		return errors.New("Store is required")
	case c.Runtime == nil:
		return errors.New("Runtime is required")
	case len(c.Protocols) == 0:
		return errors.New("Protocols: at least one upstream is required")
	}
	for name, p := range c.Protocols {
		if _, err := llm.ParseProtocol(string(p)); err != nil {
			return fmt.Errorf("Protocols[%s]: %w", name, err)
		}
	}
	switch {
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxAttemptsMax:
		return fmt.Errorf("MaxAttempts must be in [1, %d], got %d", MaxAttemptsMax, c.MaxAttempts)
	case c.PollInterval <= 0:
		return fmt.Errorf("PollInterval must be positive, got %v", c.PollInterval)
	case c.MaxBodyBytes < 1:
		return fmt.Errorf("MaxBodyBytes must be >= 1, got %d", c.MaxBodyBytes)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("MaxBatchBytes must be >= 1, got %d", c.MaxBatchBytes)
	case c.MaxBatchJobs < 1:
		return fmt.Errorf("MaxBatchJobs must be >= 1, got %d", c.MaxBatchJobs)
	case c.MaxOpenAIBatchBytes < 1:
		return fmt.Errorf("MaxOpenAIBatchBytes must be >= 1, got %d", c.MaxOpenAIBatchBytes)
	case c.MaxOpenAIBatchJobs < 1:
		return fmt.Errorf("MaxOpenAIBatchJobs must be >= 1, got %d", c.MaxOpenAIBatchJobs)
	case c.MaxLongPoll <= 0:
		return fmt.Errorf("MaxLongPoll must be positive, got %v", c.MaxLongPoll)
	case c.BatchFinalizing < 0:
		return fmt.Errorf("BatchFinalizing must not be negative, got %v", c.BatchFinalizing)
	case c.BatchRetention < 0:
		return fmt.Errorf("BatchRetention must not be negative, got %v", c.BatchRetention)
	}
	for name, p := range c.BatchPriority {
		if !p.Valid() {
			return fmt.Errorf("BatchPriority[%s]: %d is not a class", name, int(p))
		}
	}
	return nil
}

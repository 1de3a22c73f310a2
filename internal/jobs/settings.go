package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/webhook"
)

// Defaults of Settings the jobs package does not define itself.
const (
	// RetentionSucceededDefault is how long a succeeded job is kept.
	RetentionSucceededDefault = jobstore.SucceededRetentionDefault
	// RetentionDeadDefault is how long a dead job is kept.
	RetentionDeadDefault = jobstore.DeadRetentionDefault
	// RetentionCanceledDefault is how long a canceled job is kept.
	RetentionCanceledDefault = jobstore.CanceledRetentionDefault
)

// Settings are the job queue's user-settable fields, with their YAML
// names: the gateway's jobs: section (docs/config.md) decodes into them,
// and Config embeds them (its fields are promoted). A zero field takes its
// default (WithDefaults); Validate names a bad field by its YAML path,
// without the "jobs." the gateway puts before it.
type Settings struct {
	// LeaseFor is how long a running job's lease lasts without a
	// heartbeat; a job whose worker died is called again after it. At
	// least 1s. Defaults to 30s (LeaseForDefault).
	LeaseFor time.Duration `yaml:"lease_for"`
	// MaxInFlightPerUpstream caps the admissions a worker keeps
	// outstanding for one upstream: tickets waiting in its engine plus
	// calls in flight (only the latter hold a lease; live traffic is not
	// counted). Defaults to 64 (MaxInFlightPerUpstreamDefault).
	MaxInFlightPerUpstream int `yaml:"max_in_flight"`
	// MaxAttempts is a job's attempt budget when the submitter names none
	// (the job API applies it), at most jobsapi.MaxAttemptsMax. Defaults to
	// 6 (jobsapi.MaxAttemptsDefault).
	MaxAttempts int `yaml:"max_attempts"`
	// MaxStalls is how many expired leases a job survives before it is
	// dead-lettered. Defaults to 3 (MaxStallsDefault).
	MaxStalls int `yaml:"max_stalls"`
	// Retry is the backoff of a job requeued after a failed call.
	// Defaults to Retry's defaults.
	Retry Retry `yaml:"retry"`
	// WebhookSecret signs webhooks: the Standard Webhooks
	// webhook-signature (HMAC-SHA256 of id.timestamp.body; a "whsec_"
	// secret is base64 after the prefix, any other string is the key as
	// is) and the legacy X-Sluice-Signature (HMAC-SHA256 of the body keyed
	// with the string). Defaults to empty: webhooks are sent unsigned.
	WebhookSecret string `yaml:"webhook_secret"`
	// Webhooks tunes the delivery of completion webhooks. Defaults to
	// Webhooks's defaults.
	Webhooks Webhooks `yaml:"webhooks"`
	// Retention is how long finished jobs are kept, per state. The job
	// cleaner reads it (jobstore.JobCleaner, run beside the Service by the
	// gateway), not the Service. Defaults to Retention's defaults.
	Retention Retention `yaml:"retention"`
	// SpoolDir is the directory where a worker keeps a finished result
	// (a success, or a terminal failure) that the store could not take
	// before the worker's lease could no longer be trusted or the service
	// stopped; the results there are written back before any claim, at
	// start-up and after an outage. Empty: no spool (such a result is
	// dropped and its job called again once its lease expires). Defaults
	// to empty; the gateway fills it before building the Service: the
	// SQLite file's path plus ".spool", or ./sluice-spool with
	// PostgreSQL, unless spool_dir is "none".
	SpoolDir string `yaml:"spool_dir"`
}

// Retry is the backoff of a requeued job: full jitter, the ceiling
// doubling from BaseDelay to MaxDelay, never before the provider's retry
// hint.
type Retry struct {
	// BaseDelay is the first backoff ceiling. Defaults to 2s
	// (RetryBaseDelayDefault).
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the backoff ceiling, at least BaseDelay. Defaults to
	// 5m (RetryMaxDelayDefault), or BaseDelay when larger.
	MaxDelay time.Duration `yaml:"max_delay"`
}

// Webhooks tunes the delivery of completion webhooks from the store's
// outbox.
type Webhooks struct {
	// RetryFor is how long a delivery is retried (from the job's finish,
	// or from a redeliver) before it is marked failed. Defaults to 24h
	// (WebhookRetryForDefault).
	RetryFor time.Duration `yaml:"retry_for"`
	// BaseDelay is the first retry's backoff ceiling, doubling after (full
	// jitter). Defaults to 1s (WebhookBaseDelayDefault).
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the retry backoff, at least BaseDelay. Defaults to 1h
	// (WebhookMaxDelayDefault), or BaseDelay when larger.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Timeout bounds one POST. Defaults to 10s (WebhookTimeoutDefault).
	Timeout time.Duration `yaml:"timeout"`
	// Allow lists the loopback and private destinations webhooks may be
	// sent to: CIDRs ("10.0.0.0/8"), IPs or host names; link-local and
	// metadata addresses are refused whatever it says, public addresses
	// are always allowed. The gateway builds its webhook.Guard from it
	// (Config.WebhookClient, and the job API's jobsapi.Config.WebhookCheck);
	// the Service does not read it. Defaults to none.
	Allow []string `yaml:"allow"`
}

// Retention is how long finished jobs are kept before the cleaner deletes
// them.
type Retention struct {
	// Succeeded defaults to 24h (RetentionSucceededDefault).
	Succeeded time.Duration `yaml:"succeeded"`
	// Dead defaults to 168h (RetentionDeadDefault).
	Dead time.Duration `yaml:"dead"`
	// Canceled defaults to 24h (RetentionCanceledDefault).
	Canceled time.Duration `yaml:"canceled"`
	// ProviderBatches is how long a batch made through a provider's own
	// batch API (and its results) is kept after its 24-hour window,
	// whatever the three above. Defaults to 696h, Anthropic's 29 days
	// (jobsapi.BatchRetentionDefault).
	ProviderBatches time.Duration `yaml:"provider_batches"`
}

// WithDefaults returns s with its zero fields set to their defaults
// (SpoolDir stays as it is). It is pure and idempotent.
func (s Settings) WithDefaults() Settings {
	s.LeaseFor = cmp.Or(s.LeaseFor, LeaseForDefault)
	s.MaxInFlightPerUpstream = cmp.Or(s.MaxInFlightPerUpstream, MaxInFlightPerUpstreamDefault)
	s.MaxAttempts = cmp.Or(s.MaxAttempts, jobsapi.MaxAttemptsDefault)
	s.MaxStalls = cmp.Or(s.MaxStalls, MaxStallsDefault)
	s.Retry.BaseDelay = cmp.Or(s.Retry.BaseDelay, RetryBaseDelayDefault)
	s.Retry.MaxDelay = cmp.Or(s.Retry.MaxDelay, max(RetryMaxDelayDefault, s.Retry.BaseDelay))
	s.Webhooks.RetryFor = cmp.Or(s.Webhooks.RetryFor, WebhookRetryForDefault)
	s.Webhooks.BaseDelay = cmp.Or(s.Webhooks.BaseDelay, WebhookBaseDelayDefault)
	s.Webhooks.MaxDelay = cmp.Or(s.Webhooks.MaxDelay, max(WebhookMaxDelayDefault, s.Webhooks.BaseDelay))
	s.Webhooks.Timeout = cmp.Or(s.Webhooks.Timeout, WebhookTimeoutDefault)
	s.Retention.Succeeded = cmp.Or(s.Retention.Succeeded, RetentionSucceededDefault)
	s.Retention.Dead = cmp.Or(s.Retention.Dead, RetentionDeadDefault)
	s.Retention.Canceled = cmp.Or(s.Retention.Canceled, RetentionCanceledDefault)
	s.Retention.ProviderBatches = cmp.Or(s.Retention.ProviderBatches, jobsapi.BatchRetentionDefault)
	return s
}

// Validate reports the first invalid field of s once defaulted, named by
// its YAML path (e.g. "retry.max_delay: must be >= retry.base_delay"). A
// zero field is valid: it takes the default.
func (s Settings) Validate() error {
	d := s.WithDefaults()
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"lease_for", int64(d.LeaseFor)},
		{"max_in_flight", int64(d.MaxInFlightPerUpstream)},
		{"max_attempts", int64(d.MaxAttempts)},
		{"max_stalls", int64(d.MaxStalls)},
		{"retry.base_delay", int64(d.Retry.BaseDelay)},
		{"retry.max_delay", int64(d.Retry.MaxDelay)},
		{"webhooks.retry_for", int64(d.Webhooks.RetryFor)},
		{"webhooks.base_delay", int64(d.Webhooks.BaseDelay)},
		{"webhooks.max_delay", int64(d.Webhooks.MaxDelay)},
		{"webhooks.timeout", int64(d.Webhooks.Timeout)},
		{"retention.succeeded", int64(d.Retention.Succeeded)},
		{"retention.dead", int64(d.Retention.Dead)},
		{"retention.canceled", int64(d.Retention.Canceled)},
		{"retention.provider_batches", int64(d.Retention.ProviderBatches)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be >= 0", f.name)
		}
	}
	switch {
	case d.LeaseFor < time.Second:
		return errors.New("lease_for: must be at least 1s")
	case d.MaxAttempts > jobsapi.MaxAttemptsMax:
		return fmt.Errorf("max_attempts: must be at most %d, got %d", jobsapi.MaxAttemptsMax, d.MaxAttempts)
	case d.Retry.MaxDelay < d.Retry.BaseDelay:
		return errors.New("retry.max_delay: must be >= retry.base_delay")
	case d.Webhooks.MaxDelay < d.Webhooks.BaseDelay:
		return errors.New("webhooks.max_delay: must be >= webhooks.base_delay")
	}
	if _, err := webhook.NewSigner(d.WebhookSecret); err != nil {
		return fmt.Errorf("webhook_secret: %w", err)
	}
	if _, err := webhook.NewGuard(d.Webhooks.Allow); err != nil {
		return fmt.Errorf("webhooks.%w", err)
	}
	return nil
}

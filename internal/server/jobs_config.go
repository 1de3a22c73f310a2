package server

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/webhook"
)

// JobsConfig tunes the durable job queue (POST /v1/jobs, /v1/batches). Zero
// values take the defaults of the jobs and queue packages, listed in
// docs/config.md.
type JobsConfig struct {
	// LeaseFor is how long a running job's lease lasts without a
	// heartbeat; a job whose worker died is retried after it. Defaults to
	// 30s.
	LeaseFor time.Duration `yaml:"lease_for"`
	// MaxInFlight caps the jobs of one upstream handed to its dispatcher at
	// once (live traffic is not counted). Defaults to 64.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxAttempts is a job's attempt budget when the submitter names none.
	// Defaults to 6.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxStalls is how many expired leases a job survives before it is
	// dead-lettered. Defaults to 3.
	MaxStalls int `yaml:"max_stalls"`
	// WebhookSecret signs completion webhooks: the Standard Webhooks
	// webhook-signature (a "whsec_" secret is base64 after the prefix; any
	// other string is the HMAC key as is) and X-Sluice-Signature. Defaults
	// to empty (unsigned).
	WebhookSecret string `yaml:"webhook_secret"`
	// Webhooks tunes the delivery of completion webhooks.
	Webhooks WebhooksConfig `yaml:"webhooks"`
	// Retention is how long finished jobs are kept, per state.
	Retention RetentionConfig `yaml:"retention"`
	// SpoolDir is where a worker keeps a provider's answer the store could
	// not take before its lease ran out (or the gateway stopped), written
	// back before any claim once the store answers; "none" turns it off.
	// Defaults to the SQLite file's path plus ".spool", or SpoolDirDefault
	// for PostgreSQL.
	SpoolDir string `yaml:"spool_dir"`
}

// SpoolDirDefault is the result spool's directory with a PostgreSQL store.
const SpoolDirDefault = "./sluice-spool"

// spoolDir is the result spool's directory for store, "" for none.
func (j JobsConfig) spoolDir(store string) string {
	switch {
	case j.SpoolDir == StoreNone:
		return ""
	case j.SpoolDir != "":
		return j.SpoolDir
	case strings.HasPrefix(store, "sqlite:"):
		return strings.TrimPrefix(strings.TrimPrefix(store, "sqlite:"), "//") + ".spool"
	}
	return SpoolDirDefault
}

// RetentionConfig is how long finished jobs are kept before the cleaner
// deletes them. Zero takes the default.
type RetentionConfig struct {
	// Succeeded defaults to 24h.
	Succeeded time.Duration `yaml:"succeeded"`
	// Dead defaults to 168h (7 days).
	Dead time.Duration `yaml:"dead"`
	// Canceled defaults to 24h.
	Canceled time.Duration `yaml:"canceled"`
}

// WebhooksConfig tunes webhook delivery from the store's outbox. Zero takes
// the default.
type WebhooksConfig struct {
	// RetryFor is how long a delivery is retried (from the job's finish or
	// a redeliver) before it is marked failed. Defaults to 24h.
	RetryFor time.Duration `yaml:"retry_for"`
	// BaseDelay is the first retry's backoff ceiling, doubling after (full
	// jitter). Defaults to 1s.
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the backoff. Defaults to 1h.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Timeout bounds one POST. Defaults to 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Allow lists the loopback and private destinations webhooks may be
	// sent to: CIDRs ("10.0.0.0/8"), IPs or host names. Link-local and
	// metadata addresses are refused whatever it says; public addresses
	// are always allowed (internal/webhook.Guard). Defaults to none.
	Allow []string `yaml:"allow"`
}

func (j JobsConfig) validate() error {
	switch {
	case j.LeaseFor < 0:
		return errors.New("lease_for: must be >= 0")
	case j.LeaseFor > 0 && j.LeaseFor < time.Second:
		return errors.New("lease_for: must be at least 1s")
	case j.MaxInFlight < 0:
		return errors.New("max_in_flight: must be >= 0")
	case j.MaxAttempts < 0:
		return errors.New("max_attempts: must be >= 0")
	case j.MaxStalls < 0:
		return errors.New("max_stalls: must be >= 0")
	case j.Webhooks.RetryFor < 0:
		return errors.New("webhooks.retry_for: must be >= 0")
	case j.Webhooks.BaseDelay < 0:
		return errors.New("webhooks.base_delay: must be >= 0")
	case j.Webhooks.MaxDelay < 0:
		return errors.New("webhooks.max_delay: must be >= 0")
	case j.Webhooks.MaxDelay > 0 && j.Webhooks.MaxDelay < j.Webhooks.BaseDelay:
		return errors.New("webhooks.max_delay: must be >= webhooks.base_delay")
	case j.Webhooks.Timeout < 0:
		return errors.New("webhooks.timeout: must be >= 0")
	case j.Retention.Succeeded < 0:
		return errors.New("retention.succeeded: must be >= 0")
	case j.Retention.Dead < 0:
		return errors.New("retention.dead: must be >= 0")
	case j.Retention.Canceled < 0:
		return errors.New("retention.canceled: must be >= 0")
	}
	if _, err := webhook.NewGuard(j.Webhooks.Allow); err != nil {
		return fmt.Errorf("webhooks.%w", err)
	}
	return nil
}

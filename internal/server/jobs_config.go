package server

import (
	"errors"
	"strings"
	"time"
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
	// WebhookSecret keys the HMAC-SHA256 in X-Sluice-Signature of
	// completion webhooks. Defaults to empty (unsigned).
	WebhookSecret string `yaml:"webhook_secret"`
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
	case j.Retention.Succeeded < 0:
		return errors.New("retention.succeeded: must be >= 0")
	case j.Retention.Dead < 0:
		return errors.New("retention.dead: must be >= 0")
	case j.Retention.Canceled < 0:
		return errors.New("retention.canceled: must be >= 0")
	}
	return nil
}

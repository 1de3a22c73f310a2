package jobs

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/jobsapi"
)

// TestSettingsYAML: the gateway's jobs: section decodes into every field
// of Settings, unknown fields are refused, and a zero field takes its
// default.
func TestSettingsYAML(t *testing.T) {
	t.Parallel()
	const doc = `
lease_for: 40s
max_in_flight: 8
max_attempts: 9
max_stalls: 2
retry: {base_delay: 3s, max_delay: 1m}
webhook_secret: s
webhooks: {retry_for: 2h, base_delay: 2s, max_delay: 5m, timeout: 4s, allow: [10.0.0.0/8]}
retention: {succeeded: 1h, dead: 2h, canceled: 3h, provider_batches: 4h}
spool_dir: /var/spool/sluice
`
	dec := yaml.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.KnownFields(true)
	var s Settings
	require.NoError(t, dec.Decode(&s))
	require.Equal(t, Settings{
		LeaseFor: 40 * time.Second, MaxInFlightPerUpstream: 8, MaxAttempts: 9, MaxStalls: 2,
		Retry:         Retry{BaseDelay: 3 * time.Second, MaxDelay: time.Minute},
		WebhookSecret: "s",
		Webhooks:      Webhooks{RetryFor: 2 * time.Hour, BaseDelay: 2 * time.Second, MaxDelay: 5 * time.Minute, Timeout: 4 * time.Second, Allow: []string{"10.0.0.0/8"}},
		Retention:     Retention{Succeeded: time.Hour, Dead: 2 * time.Hour, Canceled: 3 * time.Hour, ProviderBatches: 4 * time.Hour},
		SpoolDir:      "/var/spool/sluice",
	}, s)
	require.NoError(t, s.Validate())
	require.Equal(t, s, s.WithDefaults(), "every field set: nothing to default")

	dec = yaml.NewDecoder(bytes.NewReader([]byte("retry: {jitter: 1s}")))
	dec.KnownFields(true)
	require.ErrorContains(t, dec.Decode(&Settings{}), "jitter")

	d := Settings{}.WithDefaults()
	require.Equal(t, Settings{
		LeaseFor: LeaseForDefault, MaxInFlightPerUpstream: MaxInFlightPerUpstreamDefault, MaxAttempts: jobsapi.MaxAttemptsDefault, MaxStalls: MaxStallsDefault,
		Retry:     Retry{BaseDelay: RetryBaseDelayDefault, MaxDelay: RetryMaxDelayDefault},
		Webhooks:  Webhooks{RetryFor: WebhookRetryForDefault, BaseDelay: WebhookBaseDelayDefault, MaxDelay: WebhookMaxDelayDefault, Timeout: WebhookTimeoutDefault},
		Retention: Retention{Succeeded: RetentionSucceededDefault, Dead: RetentionDeadDefault, Canceled: RetentionCanceledDefault, ProviderBatches: jobsapi.BatchRetentionDefault},
	}, d)
	require.Equal(t, d, d.WithDefaults(), "idempotent")
	require.NoError(t, Settings{}.Validate(), "zero is valid: every field takes its default")
}

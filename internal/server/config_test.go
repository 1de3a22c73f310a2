package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/membudget"
	upcfg "github.com/sluicehq/sluice/upstream"
	"github.com/stretchr/testify/require"
)

// env returns a LookupEnv over m, so parallel tests need no t.Setenv.
func env(m map[string]string) LookupEnv {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

const fullConfig = `
listen: 127.0.0.1:9090
store: postgres://postgres@127.0.0.1:5432/test
max_body_bytes: 1048576
max_request_bytes_in_flight: 268435456
request_bytes_wait: 500ms
shutdown_grace: 5s
upstreams:
  - name: anthropic
    protocol: anthropic
    api_key: ${ANTHROPIC_API_KEY}
    limits: {requests_per_minute: 50, input_tokens_per_minute: 30000, output_tokens_per_minute: 8000, max_concurrency: "${CONC:-16}"}
    burst_seconds: 10
    safety_margin: 0.9
    request_timeout: 2m
    retry: {base_delay: 500ms, max_delay: 8s, max_attempts: 4, budget_ratio: 0.2}
    breaker: {failure_ratio: 0.5, min_requests: 20, window: 30s, open_timeout: 10s, consecutive_failures: 3, half_open_probes: 2}
    classes:
      critical: {weight: 8, max_wait: 5s}
      low: {weight: 1, max_wait: 1h}
  - name: oai
    protocol: openai
    base_url: http://127.0.0.1:1234
    api_key: "${OPENAI_API_KEY:-sk-local}"
clients:
  - {name: web, key: "${SLUICE_KEY_WEB}", default_priority: high, max_priority: critical}
  - {name: batch, key: k2, default_priority: low, max_priority: "2"}
`

func TestParseConfigFull(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte(fullConfig), env(map[string]string{
		"ANTHROPIC_API_KEY": "sk-ant-secret",
		"SLUICE_KEY_WEB":    "web-key",
	}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9090", cfg.Listen)
	require.Equal(t, int64(1<<20), cfg.MaxBodyBytes)
	require.Equal(t, int64(256<<20), cfg.MaxRequestBytesInFlight)
	require.Equal(t, 500*time.Millisecond, cfg.RequestBytesWait)
	require.Equal(t, 5*time.Second, cfg.ShutdownGrace)
	require.Len(t, cfg.Upstreams, 2)
	a := cfg.Upstreams[0]
	require.Equal(t, llm.Anthropic, a.Protocol)
	require.Equal(t, upcfg.AnthropicBaseURLDefault, a.BaseURL)
	require.Equal(t, "sk-ant-secret", a.APIKey)
	require.Equal(t, upcfg.Limits{RequestsPerMinute: 50, InputTokensPerMinute: 30000, OutputTokensPerMinute: 8000, MaxConcurrency: 16}, a.Limits)
	require.Equal(t, upcfg.Retry{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, MaxAttempts: 4, BudgetRatio: 0.2, BudgetMin: upcfg.BudgetMinDefault}, a.Retry)
	require.Equal(t, upcfg.Breaker{FailureRatio: 0.5, MinRequests: 20, Window: 30 * time.Second, OpenTimeout: 10 * time.Second, ConsecutiveFailures: 3, HalfOpenProbes: 2}, a.Breaker)
	require.Equal(t, upcfg.Class{Weight: 8, MaxWait: 5 * time.Second}, a.Classes.Critical)
	require.Equal(t, upcfg.Class{Weight: 1, MaxWait: time.Hour, Headroom: 0.20}, a.Classes.Low)
	require.Equal(t, upcfg.Class{Weight: 4, MaxWait: time.Minute, Headroom: 0.10}, a.Classes.High, "defaulted")
	require.Equal(t, 2*time.Minute, a.RequestTimeout)
	o := cfg.Upstreams[1]
	require.Equal(t, "sk-local", o.APIKey)
	require.Equal(t, "http://127.0.0.1:1234", o.BaseURL)
	require.Equal(t, []clients.Config{
		{Name: "web", Key: "web-key", DefaultPriority: "high", MaxPriority: "critical", Role: clients.RoleClient},
		{Name: "batch", Key: "k2", DefaultPriority: "low", MaxPriority: "2", Role: clients.RoleClient},
	}, cfg.Clients)
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte("upstreams: [{name: a, protocol: openai, api_key: k}]\nclients: [{name: c, key: x}]\n"), env(nil))
	require.NoError(t, err)
	require.Equal(t, ListenDefault, cfg.Listen)
	require.Equal(t, StoreDefault, cfg.Store)
	require.Equal(t, int64(MaxBodyBytesDefault), cfg.MaxBodyBytes)
	require.Equal(t, ShutdownGraceDefault, cfg.ShutdownGrace)
	require.Equal(t, membudget.DefaultRequestBytes(MaxRequestBytesInFlightDefault, SmallRequestBytes), cfg.MaxRequestBytesInFlight)
	require.Equal(t, RequestBytesWaitDefault, cfg.RequestBytesWait)
	require.Equal(t, upcfg.OpenAIBaseURLDefault, cfg.Upstreams[0].BaseURL)
	require.Equal(t, "normal", cfg.Clients[0].DefaultPriority)
	require.Equal(t, "critical", cfg.Clients[0].MaxPriority)
}

func TestParseConfigEnvExpansion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		env         map[string]string
		want        string
		wantErr     string
	}{
		{"set", "${K}", map[string]string{"K": "v"}, "v", ""},
		{"default unset", "${K:-d}", nil, "d", ""},
		{"default empty", "${K:-d}", map[string]string{"K": ""}, "d", ""},
		{"set empty no default", "a${K}b", map[string]string{"K": ""}, "ab", ""},
		{"embedded", "pre-${K}-${J:-x}", map[string]string{"K": "1"}, "pre-1-x", ""},
		{"escaped", "$${K}", nil, "${K}", ""},
		{"yaml special chars", "${K}", map[string]string{"K": "a: #b 'c\""}, "a: #b 'c\"", ""},
		{"numeric secret", "${K}", map[string]string{"K": "12345"}, "12345", ""},
		{"null-like secret", "${K}", map[string]string{"K": "null"}, "null", ""},
		{"quoted", `"${K}"`, map[string]string{"K": "true"}, "true", ""},
		{"unset", "${MISSING_KEY}", nil, "", "MISSING_KEY is not set"},
		{"unterminated", "${K", nil, "", "unterminated"},
		{"bad name", "${1K}", nil, "", "invalid environment variable name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := "upstreams:\n  - name: a\n    protocol: openai\n    api_key: " + tc.value + "\n"
			cfg, err := ParseConfig([]byte(doc), env(tc.env))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, "line 4")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Upstreams[0].APIKey)
		})
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	const up0 = "  - {name: a, protocol: anthropic, api_key: k}\n"
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"empty", "", "empty"},
		{"unknown field", "listen: 127.0.0.1:1\nlisen: x\n" + "upstreams:\n" + up0, "line 2: lisen: unknown field; did you mean listen?"},
		{"unknown nested field", "upstreams:\n  - {name: a, protocol: anthropic, api_key: k, limits: {rpm: 1}}\n", "upstreams[0].limits.rpm: unknown field"},
		{"bad duration", "shutdown_grace: soon\nupstreams:\n" + up0, "soon"},
		{"no upstreams", "listen: 127.0.0.1:1\n", "upstreams: at least one"},
		{"listen", "listen: nonsense\nupstreams:\n" + up0, "listen:"},
		{"public without clients", "listen: 0.0.0.0:8080\nupstreams:\n" + up0, "listen: 0.0.0.0:8080 is not a loopback address"},
		{"store", "store: mysql://x\nupstreams:\n" + up0, "store: \"mysql:...\""},
		{"store sqlite empty", "store: 'sqlite:'\nupstreams:\n" + up0, "store: sqlite: needs a path"},
		{"max_body_bytes", "max_body_bytes: -1\nupstreams:\n" + up0, "max_body_bytes: must be >= 0"},
		{"shutdown_grace", "shutdown_grace: -1s\nupstreams:\n" + up0, "shutdown_grace: must be >= 0"},
		{"max_request_bytes_in_flight", "max_request_bytes_in_flight: 1000\nupstreams:\n" + up0, "max_request_bytes_in_flight: must be at least 65536"},
		{"request_bytes_wait", "request_bytes_wait: -1s\nupstreams:\n" + up0, "request_bytes_wait: must be >= 0"},
		{"name", "upstreams:\n  - {name: A B, protocol: anthropic, api_key: k}\n", "upstreams[0].name:"},
		{"reserved name", "upstreams:\n  - {name: v1, protocol: anthropic, api_key: k}\n", "upstreams[0].name: \"v1\" is reserved"},
		{"duplicate name", "upstreams:\n" + up0 + up0, "upstreams[1].name: duplicate"},
		{"protocol", "upstreams:\n  - {name: a, protocol: gemini, api_key: k}\n", `upstreams[0].protocol: "gemini" is not one of anthropic, openai`},
		{"base_url scheme", "upstreams:\n  - {name: a, protocol: openai, api_key: k, base_url: 'ftp://x'}\n", "upstreams[0].base_url:"},
		{"base_url creds", "upstreams:\n  - {name: a, protocol: openai, api_key: k, base_url: 'https://u:p@x'}\n", "upstreams[0].base_url: must not contain credentials"},
		{"api_key", "upstreams:\n  - {name: a, protocol: openai}\n", "upstreams[0].api_key: required"},
		{"rpm", "upstreams:\n" + up0 + "  - {name: b, protocol: openai, api_key: k, limits: {requests_per_minute: -1}}\n", "upstreams[1].limits.requests_per_minute: must be >= 0"},
		{"itpm", "upstreams:\n" + up0 + "  - {name: b, protocol: openai, api_key: k, limits: {input_tokens_per_minute: -5}}\n", "upstreams[1].limits.input_tokens_per_minute: must be >= 0"},
		{"otpm", "upstreams:\n  - {name: b, protocol: openai, api_key: k, limits: {output_tokens_per_minute: -5}}\n", "upstreams[0].limits.output_tokens_per_minute: must be >= 0"},
		{"tpm", "upstreams:\n  - {name: b, protocol: openai, api_key: k, limits: {tokens_per_minute: -5}}\n", "upstreams[0].limits.tokens_per_minute: must be >= 0"},
		{"concurrency", "upstreams:\n  - {name: b, protocol: openai, api_key: k, limits: {max_concurrency: -5}}\n", "upstreams[0].limits.max_concurrency: must be >= 0"},
		{"burst", "upstreams:\n  - {name: b, protocol: openai, api_key: k, burst_seconds: -1}\n", "upstreams[0].burst_seconds: must be > 0 and <= 60"},
		{"burst nan", "upstreams:\n  - {name: b, protocol: openai, api_key: k, burst_seconds: .nan}\n", "upstreams[0].burst_seconds:"},
		{"safety_margin", "upstreams:\n  - {name: b, protocol: openai, api_key: k, safety_margin: 1.5}\n", "upstreams[0].safety_margin: must be > 0 and <= 1"},
		{"request_timeout", "upstreams:\n  - {name: b, protocol: openai, api_key: k, request_timeout: -1s}\n", "upstreams[0].request_timeout: must be >= 0"},
		{"retry.base_delay", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {base_delay: -1s}}\n", "upstreams[0].retry.base_delay: must be >= 0"},
		{"retry.base over max", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {base_delay: 9s, max_delay: 1s}}\n", "upstreams[0].retry.base_delay: must be <= retry.max_delay"},
		{"retry.max_delay", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {max_delay: -1s}}\n", "upstreams[0].retry.max_delay: must be >= 0"},
		{"retry.max_attempts", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {max_attempts: -1}}\n", "upstreams[0].retry.max_attempts: must be >= 0"},
		{"retry.budget_ratio", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {budget_ratio: 2}}\n", "upstreams[0].retry.budget_ratio: must be > 0 and <= 1"},
		{"breaker.failure_ratio", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {failure_ratio: -0.1}}\n", "upstreams[0].breaker.failure_ratio:"},
		{"breaker.min_requests", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {min_requests: -1}}\n", "upstreams[0].breaker.min_requests: must be >= 0"},
		{"breaker.window", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {window: -1s}}\n", "upstreams[0].breaker.window: must be >= 0"},
		{"breaker.open_timeout", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {open_timeout: -1s}}\n", "upstreams[0].breaker.open_timeout: must be >= 0"},
		{"breaker.consecutive_failures", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {consecutive_failures: -1}}\n", "upstreams[0].breaker.consecutive_failures: must be >= 0"},
		{"breaker.half_open_probes", "upstreams:\n  - {name: b, protocol: openai, api_key: k, breaker: {half_open_probes: -1}}\n", "upstreams[0].breaker.half_open_probes: must be >= 0"},
		{"min_concurrency", "upstreams:\n  - {name: b, protocol: openai, api_key: k, min_concurrency: -1}\n", "upstreams[0].min_concurrency: must be >= 0"},
		{"min over max concurrency", "upstreams:\n  - {name: b, protocol: openai, api_key: k, min_concurrency: 9, limits: {max_concurrency: 4}}\n", "upstreams[0].min_concurrency: must be <= limits.max_concurrency"},
		{"retry.budget_min", "upstreams:\n  - {name: b, protocol: openai, api_key: k, retry: {budget_min: -1}}\n", "upstreams[0].retry.budget_min:"},
		{"profile", "upstreams:\n  - {name: b, protocol: openai, api_key: k, profile: fast}\n", `upstreams[0].profile: "fast" is not one of balanced, latency, throughput`},
		{"class name", "upstreams:\n  - {name: b, protocol: openai, api_key: k, classes: {urgent: {weight: 1}}}\n", "upstreams[0].classes.urgent: unknown field"},
		{"class weight", "upstreams:\n  - {name: b, protocol: openai, api_key: k, classes: {low: {weight: -1}}}\n", "upstreams[0].classes.low.weight: must be > 0"},
		{"class max_wait", "upstreams:\n  - {name: b, protocol: openai, api_key: k, classes: {low: {max_wait: -1s}}}\n", "upstreams[0].classes.low.max_wait: must be >= 0"},
		{"client name", "upstreams:\n" + up0 + "clients: [{key: k}]\n", "clients[0].name: required"},
		{"client key", "upstreams:\n" + up0 + "clients: [{name: a}]\n", "clients[0].key: required"},
		{"client default_priority", "upstreams:\n" + up0 + "clients: [{name: a, key: k, default_priority: urgent}]\n", `clients[0].default_priority: "urgent" is not one of critical, high, normal, low, 0, 1, 2, 3`},
		{"client max_priority", "upstreams:\n" + up0 + "clients: [{name: a, key: k, max_priority: 7}]\n", `clients[0].max_priority: "7" is not one of critical`},
		{"client default above max", "upstreams:\n" + up0 + "clients: [{name: a, key: k, default_priority: critical, max_priority: normal}]\n", "clients[0].default_priority: critical is more urgent"},
		{"client duplicate name", "upstreams:\n" + up0 + "clients: [{name: a, key: k}, {name: a, key: j}]\n", "clients[1].name: duplicate"},
		{"client duplicate key", "upstreams:\n" + up0 + "clients: [{name: a, key: k}, {name: b, key: k}]\n", "clients[1].keys: a key is used twice"},
		{"client key reused in keys", "upstreams:\n" + up0 + "clients: [{name: a, key: k}, {name: b, key: j, keys: [k]}]\n", "clients[1].keys: a key is used twice"},
		{"client key hashed twice", "upstreams:\n" + up0 + "clients: [{name: a, key: k}, {name: b, key_sha256: 8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a}]\n", "clients[1].keys: a key is used twice"},
		{"client bad key_sha256", "upstreams:\n" + up0 + "clients: [{name: a, key_sha256: xyz}]\n", "clients[0].key_sha256: want the 64 hex"},
		{"client allowed upstream unknown", "upstreams:\n" + up0 + "clients: [{name: a, key: k, allowed_upstreams: [nope]}]\n", `clients[0].allowed_upstreams[0]: no upstream is named "nope"`},
		{"client allowed model empty", "upstreams:\n" + up0 + "clients: [{name: a, key: k, allowed_models: [claude-*, '']}]\n", "clients[0].allowed_models[1]: empty pattern"},
		{"client no key", "upstreams:\n" + up0 + "clients: [{name: a}]\n", "clients[0].key: required"},
		{"client bad role", "upstreams:\n" + up0 + "clients: [{name: a, key: k, role: root}]\n", `clients[0].role: "root" is not one of client, admin`},
		{"client negative limit", "upstreams:\n" + up0 + "clients: [{name: a, key: k, limits: {requests_per_minute: -1}}]\n", "clients[0].limits.requests_per_minute: must be >= 0"},
		{"client limit unknown upstream", "upstreams:\n" + up0 + "clients: [{name: a, key: k, limits: {upstreams: {nope: {max_concurrency: 1}}}}]\n", "clients[0].limits.upstreams.nope: no upstream is named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.doc), env(nil))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestConfigErrorsAreOneLineWithPathLineAndFix: the loader's mistakes
// (issue 27's list) are one line each: the line in the file, the field's
// whole YAML path, what is wrong in YAML's words, and the fix. Validation
// errors carry the line of their field too.
func TestConfigErrorsAreOneLineWithPathLineAndFix(t *testing.T) {
	t.Parallel()
	const up = "# comment\n\nupstreams:\n  - name: anthropic\n    protocol: anthropic\n    api_key: k\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"typo", up + "    limits:\n      request_per_minute: 50\n",
			"line 8: upstreams[0].limits.request_per_minute: unknown field; did you mean requests_per_minute?"},
		{"word for a number", up + "    limits:\n      requests_per_minute: fifty\n",
			`line 8: upstreams[0].limits.requests_per_minute: want a whole number, got "fifty"`},
		{"duration without unit", up + "    request_timeout: 10\n",
			"line 7: upstreams[0].request_timeout: got 10: durations need a unit: 10s"},
		{"mis-indented key", up + "   base_url: https://x\n",
			"line 7: YAML syntax: this line is indented 3 spaces"},
		{"URL without scheme", up + "    base_url: 127.0.0.1:23019\n",
			"line 7: upstreams[0].base_url: a URL needs its scheme: http://127.0.0.1:23019"},
		{"host without scheme", up + "    base_url: localhost:23019\n",
			"line 7: upstreams[0].base_url: a URL needs its scheme: http://localhost:23019"},
		{"protocol", "upstreams:\n  - {name: a, protocol: antropic, api_key: k}\n",
			`line 2: upstreams[0].protocol: "antropic" is not one of anthropic, openai; did you mean anthropic?`},
		{"role", up + "clients: [{name: c, key: j, role: admn}]\n", "line 7: clients[0].role: \"admn\" is not one of client, admin; did you mean admin?"},
		{"api_keys object", up + "  - name: b\n    protocol: openai\n    api_keys:\n      - {key: x, limits: {tpm: 1}}\n",
			"line 10: upstreams[1].api_keys[0].limits.tpm: unknown field"},
		{"key as list", up + "  - name: b\n    protocol: openai\n    api_keys: [[y]]\n",
			"line 9: upstreams[1].api_keys[0]: want a string or a mapping"},
		{"jobs duration", up + "jobs:\n  retry:\n    base_delay: fast\n",
			`line 9: jobs.retry.base_delay: want a duration such as 500ms, 30s, 5m or 1h, got "fast"`},
		{"client limits upstream", up + "clients: [{name: c, key: k, limits: {upstreams: {anthropic: {rpm: 1}}}}]\n",
			"line 7: clients[0].limits.upstreams.anthropic.rpm: unknown field; did you mean requests_per_minute?"},
		{"validation: its line", up + "    retry: {base_delay: 9s, max_delay: 1s}\n",
			"line 7: upstreams[0].retry.base_delay: must be <= retry.max_delay"},
		{"validation: duplicate", up + "  - name: anthropic\n    protocol: anthropic\n    api_key: k\n",
			`line 7: upstreams[1].name: duplicate upstream "anthropic"`},
		{"validation: top level", "listen: 0.0.0.0:8080\n" + up, "line 1: listen: 0.0.0.0:8080 is not a loopback address"},
		{"validation: a default, no line of its own", "upstreams:\n  - {name: a, protocol: openai}\n", "line 2: upstreams[0].api_key: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.doc), env(nil))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n")
			for _, goWord := range []string{"int64", "time.Duration", "upstream.", "!!", "cannot unmarshal"} {
				require.NotContains(t, err.Error(), goWord)
			}
			_, ok := errors.AsType[*configfile.Error](err)
			require.True(t, ok, "%T", err)
		})
	}
}

func TestParseConfigNeverEchoesSecrets(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte("store: postgres://u:hunter2@[::1\nupstreams: [{name: a, protocol: openai, api_key: k}]\n"), env(nil))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
}

func TestParseConfigPublicListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc string
		ok        bool
	}{
		{"loopback v4", "listen: 127.0.0.1:1", true},
		{"loopback v6", "listen: '[::1]:1'", true},
		{"localhost", "listen: localhost:1", true},
		{"all interfaces", "listen: :8080", false},
		{"public allowed", "listen: :8080\nallow_public: true", true},
		{"public with clients", "listen: 0.0.0.0:8080\nclients: [{name: a, key: k}]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.doc+"\nupstreams: [{name: a, protocol: openai, api_key: k}]\n"), env(nil))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, "allow_public")
			}
		})
	}
}

func TestEnvConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    []string
		wantErr string
	}{
		{"both", map[string]string{"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"}, []string{"anthropic", "openai"}, ""},
		{"anthropic only", map[string]string{"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": ""}, []string{"anthropic"}, ""},
		{"openai only", map[string]string{"OPENAI_API_KEY": "o"}, []string{"openai"}, ""},
		{"none", nil, nil, "set ANTHROPIC_API_KEY and/or OPENAI_API_KEY, or pass --config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := EnvConfig(env(tc.env))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, u := range cfg.Upstreams {
				names = append(names, u.Name)
				require.Equal(t, tc.env[strings.ToUpper(u.Name)+"_API_KEY"], u.APIKey)
			}
			require.Equal(t, tc.want, names)
			require.Equal(t, ListenDefault, cfg.Listen)
			require.Empty(t, cfg.Clients)
		})
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte("upstreams: [{name: a, protocol: openai, api_key: k, limits: {rpm: 1}}]\n"), 0o600))
	_, err := LoadConfig(path, env(nil))
	require.EqualError(t, err, path+":1: upstreams[0].limits.rpm: unknown field; did you mean requests_per_minute?")
	_, err = LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"), env(nil))
	require.ErrorContains(t, err, "reading config")
}

// FuzzParseConfig checks that no input makes the config loader panic and
// that an accepted config is valid.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(fullConfig))
	f.Add([]byte("upstreams: [{name: a, protocol: openai, api_key: ${K:-x}}]"))
	f.Add([]byte("listen: ${"))
	f.Add([]byte("a: &x [*x]"))
	f.Add([]byte("upstreams: [{name: a, protocol: openai, api_key: k, classes: {low: {weight: 1}}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data, env(map[string]string{"K": "v", "ANTHROPIC_API_KEY": "s", "SLUICE_KEY_WEB": "w"}))
		if err == nil {
			require.NoError(t, cfg.validate())
		}
	})
}

// TestDocsExampleParses keeps the complete example in docs/config.md true.
func TestDocsExampleParses(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/config.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "## Complete example")
	require.True(t, ok)
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	require.True(t, ok)
	example, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	cfg, err := ParseConfig([]byte(example), env(map[string]string{
		"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "SLUICE_KEY_WEB": "w", "SLUICE_KEY_BATCH": "b",
	}))
	require.NoError(t, err)
	require.Len(t, cfg.Upstreams, 2)
	require.Len(t, cfg.Clients, 2)
}

// TestDocsUpstreamExamplesLoad: every YAML block of docs/ that has an
// upstreams: list loads as a whole gateway config (every ${VAR} set), so
// the gateway's own rules hold in the examples too: fallbacks name an
// upstream of the same protocol, every upstream has a key.
func TestDocsUpstreamExamplesLoad(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	anyVar := func(name string) (string, bool) { return "v-" + strings.ToLower(name), true }
	loaded := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		require.NoError(t, err)
		rest := string(doc)
		for n := 1; ; n++ {
			var block string
			var ok bool
			if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
				break
			}
			block, rest, ok = strings.Cut(rest, "```")
			require.True(t, ok, "%s: YAML block %d is not closed", f, n)
			if !strings.HasPrefix(block, "upstreams:") && !strings.Contains(block, "\nupstreams:") {
				continue
			}
			_, err := ParseConfig([]byte(block), anyVar)
			require.NoError(t, err, "%s, YAML block %d", filepath.Base(f), n)
			loaded++
		}
	}
	require.GreaterOrEqual(t, loaded, 2, "the complete example (config.md) and the pool (pools.md)")
}

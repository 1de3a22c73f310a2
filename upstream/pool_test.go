package upstream_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/upstream"
)

// TestKeysStringOrObject: api_keys takes strings and {key, limits, org}
// objects; a key's zero limits take the upstream's; api_key alone is a
// pool of one.
func TestKeysStringOrObject(t *testing.T) {
	t.Parallel()
	const doc = `
name: openai
protocol: openai
limits: {requests_per_minute: 100, tokens_per_minute: 1000}
api_keys:
  - k1
  - {key: k2, limits: {requests_per_minute: 50}, org: acme}
  - {key: k3, org: acme}
orgs:
  acme: {limits: {requests_per_minute: 120}}
`
	dec := yaml.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.KnownFields(true)
	var c upstream.Config
	require.NoError(t, dec.Decode(&c))
	require.NoError(t, c.Validate())
	keys := c.Keys()
	require.Len(t, keys, 3)
	require.Equal(t, "k1", keys[0].Key)
	require.Equal(t, int64(100), keys[0].Limits.RequestsPerMinute)
	require.Equal(t, int64(50), keys[1].Limits.RequestsPerMinute)
	require.Equal(t, int64(1000), keys[1].Limits.TokensPerMinute, "a zero field takes the upstream's")
	require.Equal(t, "acme", keys[2].Org)
	require.Equal(t, int64(120), c.Orgs["acme"].Limits.RequestsPerMinute)

	one := upstream.Config{Name: "a", Protocol: upstream.Anthropic, APIKey: "sk", Limits: upstream.Limits{RequestsPerMinute: 7}}
	require.Equal(t, []upstream.Key{{Key: "sk", Limits: upstream.Limits{RequestsPerMinute: 7}}}, one.Keys())
}

// TestPoolValidation: every pool error names its field.
func TestPoolValidation(t *testing.T) {
	t.Parallel()
	base := func() upstream.Config { return upstream.Config{Name: "a", Protocol: upstream.OpenAI} }
	for _, tt := range []struct {
		want string
		mod  func(*upstream.Config)
	}{
		{"api_keys: set api_key or api_keys", func(c *upstream.Config) { c.APIKey = "x"; c.APIKeys = []upstream.Key{{Key: "y"}} }},
		{"api_keys[1].key: required", func(c *upstream.Config) { c.APIKeys = []upstream.Key{{Key: "y"}, {}} }},
		{"api_keys[1].key: the same key", func(c *upstream.Config) { c.APIKeys = []upstream.Key{{Key: "y"}, {Key: "y"}} }},
		{"api_keys[0].limits.requests_per_minute: must be >= 0", func(c *upstream.Config) {
			c.APIKeys = []upstream.Key{{Key: "y", Limits: upstream.Limits{RequestsPerMinute: -1}}}
		}},
		{"api_keys[0].org:", func(c *upstream.Config) { c.APIKeys = []upstream.Key{{Key: "y", Org: "Bad Org"}} }},
		{"orgs.acme: no key", func(c *upstream.Config) {
			c.APIKeys = []upstream.Key{{Key: "y"}}
			c.Orgs = map[string]upstream.Org{"acme": {}}
		}},
		{"orgs.acme.limits.tokens_per_minute: must be >= 0", func(c *upstream.Config) {
			c.APIKeys = []upstream.Key{{Key: "y", Org: "acme"}}
			c.Orgs = map[string]upstream.Org{"acme": {Limits: upstream.Limits{TokensPerMinute: -5}}}
		}},
		{"key_probe_interval: must be >= 0", func(c *upstream.Config) { c.KeyProbeInterval = -1 }},
	} {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			c := base()
			tt.mod(&c)
			err := c.Validate()
			require.Error(t, err)
			require.True(t, len(err.Error()) >= len(tt.want) && err.Error()[:len(tt.want)] == tt.want, "%v", err)
		})
	}
}

// FuzzDecodeConfig: no YAML makes decoding (Key's string-or-object form
// included), defaulting or validating a Config panic, and a valid Config
// stays valid once defaulted.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		"name: a\nprotocol: openai\napi_keys: [k1, {key: k2, org: acme}]\norgs: {acme: {limits: {requests_per_minute: 1}}}",
		"name: a\nprotocol: anthropic\nclasses: {low: {weight: 1, headroom: -1}}\nretry: {base_delay: 1s}",
		"api_keys: [[]]", "api_keys: [{key: [1]}]", "api_keys: k", "fallbacks: [{upstream: b}]\nfallback_classes: [urgent]",
		"profile: latency\nlimits: {max_concurrency: 2}", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		var c upstream.Config
		if dec.Decode(&c) != nil {
			return
		}
		_ = c.Keys()
		if c.Validate() == nil {
			require.NoError(t, c.WithDefaults().Validate())
		}
	})
}

// TestKeyRefusesUnknownFields: an api_keys object's unknown fields (its
// own or its limits') are refused with the strict decoder's message and
// line, as everywhere else in the config; a list or a map where a key
// belongs is a type error, not a panic.
func TestKeyRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, want string }{
		{"api_keys:\n  - k1\n  - {key: k2, orgg: a}", "line 3: field orgg not found in type upstream.Key"},
		{"api_keys:\n  - {key: k2, limits: {rpm: 1}}", "line 2: field rpm not found in type upstream.Limits"},
		{"api_keys: [[k]]", "line 1: cannot unmarshal !!seq into an API key"},
		{"api_keys: [{key: [k]}]", "line 1: cannot unmarshal !!seq into string"},
	} {
		dec := yaml.NewDecoder(bytes.NewReader([]byte(tt.doc)))
		dec.KnownFields(true)
		var c upstream.Config
		require.ErrorContains(t, dec.Decode(&c), tt.want, tt.doc)
	}
	var c upstream.Config
	require.NoError(t, yaml.Unmarshal([]byte("api_keys: [&k {key: k1, org: a}, *k]"), &c), "anchors and aliases")
	require.Equal(t, []upstream.Key{{Key: "k1", Org: "a"}, {Key: "k1", Org: "a"}}, c.APIKeys)
}

package sluice

import "github.com/sluicehq/sluice/upstream"

// Upstream configures one provider endpoint: its protocol, URL, key,
// quotas, and the engine's tuning. It is the gateway's own upstream config
// (package upstream): an entry of the gateway's upstreams: list decodes
// into it, with the same fields, defaults and YAML names
// (docs/config.md). A zero field takes the profile's value, else its
// default. Fallbacks are the gateway's: a Transport has one upstream.
type Upstream = upstream.Config

// Protocol names a provider wire protocol.
type Protocol = upstream.Protocol

// The supported protocols.
const (
	// Anthropic is the Messages API (POST /v1/messages).
	Anthropic = upstream.Anthropic
	// OpenAI is the Chat Completions API (POST /v1/chat/completions), also
	// spoken by many OpenAI-compatible gateways.
	OpenAI = upstream.OpenAI
)

// Profile presets an upstream's class, retry and wait settings in one
// word; docs/config.md has the table of what each sets. A profile fills
// only the fields left zero, so an explicitly set field always wins.
type Profile = upstream.Profile

// The profiles.
const (
	// Balanced is the defaults: nothing beyond them is preset.
	Balanced = upstream.Balanced
	// Latency is for interactive traffic: short class waits, a larger
	// critical share, more headroom kept for urgent requests, and quick
	// retries that give up early.
	Latency = upstream.Latency
	// Throughput is for offline and batch traffic: long class waits and
	// patient retries, so work waits for quota instead of failing.
	Throughput = upstream.Throughput
)

// The parts of an Upstream.
type (
	// Limits are an upstream's per-minute quotas and concurrency cap.
	Limits = upstream.Limits
	// Key is one provider key of a pool (Upstream.APIKeys); in YAML a
	// string or a {key, limits, org} object.
	Key = upstream.Key
	// Org is an account whose quotas its keys share (Upstream.Orgs).
	Org = upstream.Org
	// Retry shapes retries of attempts that fail with an overload or
	// transient error.
	Retry = upstream.Retry
	// Breaker is an upstream's circuit breaker.
	Breaker = upstream.Breaker
	// Classes are the four priority classes' settings.
	Classes = upstream.Classes
	// Class is one priority class's scheduling settings.
	Class = upstream.Class
)

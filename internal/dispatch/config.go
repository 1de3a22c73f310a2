package dispatch

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

// Engine constants: how the engine behaves, not what a user configures
// (that is upstream.Config, with its defaults).
const (
	// SlowDownFactor is the share of its current refill rate an upstream
	// keeps after an OpenAI 503 "Slow Down" (spec §2.3, §8.1).
	SlowDownFactor = 0.5
	// SlowDownRamp is how long the rate then takes to ramp back to the
	// limit: OpenAI asks for a steady rate for 15+ minutes before growing.
	SlowDownRamp = 15 * time.Minute
	// UsageBufferDefault is how much of a non-streamed body is kept to read
	// its usage from.
	UsageBufferDefault = 4 << 20
	// MaxClientRetryAfter caps the retry-after Sluice suggests to clients:
	// the SDKs honour short hints (openai-go caps at 8 s), and the queue
	// absorbs longer waits better than a client retry loop.
	MaxClientRetryAfter = 8 * time.Second
	// HeadroomGaps is how many of its usual inter-arrival times a more
	// urgent class stays active after its last request, for the lower
	// classes' headroom (bounded by headroom_window).
	HeadroomGaps = 10
	// HeadroomMinWindow is the least time a more urgent class stays
	// active after its last request.
	HeadroomMinWindow = 2 * time.Second
	// HighRoomShare is the part of burst_room the high class leaves for
	// critical's bursts (normal and low leave all of it for the classes
	// above them): high is interactive too, and waits behind what it
	// leaves.
	HighRoomShare = 0.2
	// AnthropicRemainingRounding is the precision of Anthropic's token
	// remaining headers (rounded to the nearest thousand, spec §1.3):
	// Observe is given half of it less than reported.
	AnthropicRemainingRounding = 1000
)

// Config is what New builds a Dispatcher from: the upstream's
// configuration (embedded: its fields are promoted) and the engine's
// dependencies.
type Config struct {
	// Config is the upstream: URL, key, quotas, classes, retry, breaker.
	// New applies its WithDefaults and Validate.
	upstream.Config
	// HTTPClient sends upstream requests. Defaults to a client with
	// UpstreamTransport(http.DefaultTransport, Config): response-header
	// timeout RequestTimeout, an idle connection kept for each of the
	// MaxConcurrency calls in flight, and no overall timeout (streams may
	// be long).
	HTTPClient *http.Client
	// FlexHTTPClient sends the requests in OpenAI's flex service tier
	// (their body's service_tier is "flex"), which the provider answers
	// more slowly. Defaults, when HTTPClient is defaulted too, to a client
	// with FlexTransport(http.DefaultTransport, Config): response-header
	// timeout Flex.Timeout; else to HTTPClient.
	FlexHTTPClient *http.Client
	// Clock is the time source. Defaults to clock.Real().
	Clock clock.Clock
	// Observer receives engine events. Defaults to NopObserver.
	Observer Observer
	// States receives the upstream's state changes (breaker, 429 pauses,
	// limits learned, keys taken out or back in), once each. Defaults to
	// NopStateObserver.
	States StateObserver
	// Tracer makes the engine's spans (queue wait, attempts, streams)
	// under the caller's span. Defaults to a no-op tracer.
	Tracer trace.Tracer
	// Rand jitters backoff and breaker periods; it is used under a lock.
	// Defaults to a randomly seeded source.
	Rand *rand.Rand
	// Responses keeps which key of the pool created each stored Response
	// beyond the process (response_keys.go), behind the dispatcher's
	// memory. Defaults to nil: the memory alone.
	Responses ResponseStore
}

// settings is a Dispatcher's resolved configuration: the defaulted Config
// plus the per-class values indexed by priority.
type settings struct {
	Config
	// Headroom is each class's headroom, clamped at 0 (negative: none).
	Headroom [llm.NumPriorities]float64
	// RoomCap is burst_room clamped at 0 (negative: no learned room).
	RoomCap float64
	// MaxWait is each class's aging bound and default deadline.
	MaxWait [llm.NumPriorities]time.Duration
}

// resolve defaults and validates c and fills in its dependencies: the one
// place an upstream.Config becomes the engine's settings.
func (c Config) resolve() (settings, error) {
	if err := c.Validate(); err != nil {
		return settings{}, fmt.Errorf("upstream %q: %w", c.Name, err)
	}
	c.Config = c.WithDefaults()
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: UpstreamTransport(http.DefaultTransport, c.Config)}
		if c.FlexHTTPClient == nil {
			c.FlexHTTPClient = &http.Client{Transport: FlexTransport(http.DefaultTransport, c.Config)}
		}
	}
	c.FlexHTTPClient = cmp.Or(c.FlexHTTPClient, c.HTTPClient)
	c.Clock = clock.Or(c.Clock)
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.States == nil {
		c.States = NopStateObserver{}
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	s := settings{Config: c}
	for p := range llm.Priority(llm.NumPriorities) {
		cl := c.Classes.Get(p)
		s.Headroom[p] = max(cl.Headroom, 0)
		s.MaxWait[p] = cl.MaxWait
	}
	s.RoomCap = max(c.BurstRoom, 0)
	return s, nil
}

// UpstreamTransport returns the transport an engine sends its upstream
// calls with, built from rt: when rt is an *http.Transport, a clone whose
// response-header timeout is c.RequestTimeout (a stream may then take as
// long as it needs) and whose idle pool keeps a connection for each of the
// up to c.Limits.MaxConcurrency calls in flight (http.Transport keeps 2 per
// host by default, so a steady load of N calls would dial N−2 fresh
// connections in every round). The number of connections is not capped
// (no MaxConnsPerHost): the engine's concurrency limit already bounds the
// calls in flight, and a second cap would add a queue the engine cannot
// see. Other transports are returned as they are. c is defaulted first.
func UpstreamTransport(rt http.RoundTripper, c upstream.Config) http.RoundTripper {
	t, ok := rt.(*http.Transport)
	if !ok {
		return rt
	}
	c = c.WithDefaults()
	t = t.Clone()
	if c.RequestTimeout > 0 {
		t.ResponseHeaderTimeout = c.RequestTimeout
	}
	if n := c.Limits.MaxConcurrency; n > 0 {
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, n)
		if t.MaxIdleConns > 0 {
			t.MaxIdleConns = max(t.MaxIdleConns, n)
		}
	}
	return t
}

// FlexTransport is UpstreamTransport(rt, c) for the requests in OpenAI's
// flex tier: its response-header timeout is c.Flex.Timeout, or
// c.RequestTimeout when that is longer. Other transports are returned as
// they are.
func FlexTransport(rt http.RoundTripper, c upstream.Config) http.RoundTripper {
	c = c.WithDefaults()
	c.RequestTimeout = max(c.RequestTimeout, c.Flex.Timeout)
	return UpstreamTransport(rt, c)
}

// flexTier is the service tier FlexHTTPClient sends.
const flexTier = "flex"

// client is the HTTP client that sends req: FlexHTTPClient for a request
// in the flex tier, else HTTPClient.
func (c Config) client(req *Request) *http.Client {
	if req != nil && req.Cost.ServiceTier == flexTier {
		return c.FlexHTTPClient
	}
	return c.HTTPClient
}

func (s settings) limiterConfig() flow.LimiterConfig {
	return flow.LimiterConfig{
		Limits: [flow.NumDims]float64{
			flow.Requests:     float64(s.Limits.RequestsPerMinute),
			flow.InputTokens:  float64(s.Limits.InputTokensPerMinute),
			flow.OutputTokens: float64(s.Limits.OutputTokensPerMinute),
			flow.Tokens:       float64(s.Limits.TokensPerMinute),
		},
		BurstSeconds:    s.BurstSeconds,
		SafetyMargin:    s.SafetyMargin,
		MaxSafetyMargin: s.MaxSafetyMargin,
		JitterAllowance: s.JitterAllowance,
	}
}

func (s settings) breakerConfig() flow.BreakerConfig {
	b := s.Breaker
	return flow.BreakerConfig{
		Window:              b.Window,
		MinRequests:         b.MinRequests,
		FailureRatio:        b.FailureRatio,
		ConsecutiveFailures: b.ConsecutiveFailures,
		OpenTimeout:         b.OpenTimeout,
		HalfOpenProbes:      b.HalfOpenProbes,
	}
}

func (s settings) weights() [llm.NumPriorities]float64 {
	var w [llm.NumPriorities]float64
	for p := range llm.Priority(llm.NumPriorities) {
		w[p] = s.Classes.Get(p).Weight
	}
	return w
}

// Upstream returns the upstream configuration the dispatcher runs with,
// defaulted.
func (d *Dispatcher) Upstream() upstream.Config { return d.cfg.Config.Config }

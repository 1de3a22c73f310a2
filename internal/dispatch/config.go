package dispatch

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/upstream"
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
)

// Config is what New builds a Dispatcher from: the upstream's
// configuration (embedded: its fields are promoted) and the engine's
// dependencies.
type Config struct {
	// Config is the upstream: URL, key, quotas, classes, retry, breaker.
	// New applies its WithDefaults and Validate.
	upstream.Config
	// HTTPClient sends upstream requests. Defaults to a client with
	// http.DefaultTransport whose response-header timeout is
	// RequestTimeout, and no overall timeout (streams may be long).
	HTTPClient *http.Client
	// Clock is the time source. Defaults to clock.Real().
	Clock clock.Clock
	// Observer receives engine events. Defaults to NopObserver.
	Observer Observer
	// Rand jitters backoff and breaker periods; it is used under a lock.
	// Defaults to a randomly seeded source.
	Rand *rand.Rand
}

// settings is a Dispatcher's resolved configuration: the defaulted Config
// plus the per-class values indexed by priority.
type settings struct {
	Config
	// Headroom is each class's headroom, clamped at 0 (negative: none).
	Headroom [llm.NumPriorities]float64
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
		c.HTTPClient = &http.Client{Transport: WithHeaderTimeout(http.DefaultTransport, c.RequestTimeout)}
	}
	c.Clock = clock.Or(c.Clock)
	if c.Observer == nil {
		c.Observer = NopObserver{}
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
	return s, nil
}

// WithHeaderTimeout returns rt with d as its response-header timeout when
// rt is an *http.Transport (a stream may then take as long as it needs);
// other transports are returned as they are.
func WithHeaderTimeout(rt http.RoundTripper, d time.Duration) http.RoundTripper {
	t, ok := rt.(*http.Transport)
	if !ok || d <= 0 {
		return rt
	}
	t = t.Clone()
	t.ResponseHeaderTimeout = d
	return t
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

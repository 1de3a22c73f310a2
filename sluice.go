// Package sluice keeps LLM traffic flowing: it queues provider calls by
// priority, admits them against the provider's request and token quotas,
// retries them honouring Retry-After, and stops hammering an overloaded
// upstream with a circuit breaker.
//
// This package is the small in-process API: a Transport that the official
// Go SDKs accept as their HTTP transport, so an application gets Sluice's
// flow control without running the gateway:
//
//	t, err := sluice.NewTransport(sluice.Upstream{
//		Name:     "anthropic",
//		Protocol: sluice.Anthropic,
//		APIKey:   os.Getenv("ANTHROPIC_API_KEY"),
//		Profile:  sluice.Latency,
//		Limits:   sluice.Limits{RequestsPerMinute: 50, InputTokensPerMinute: 30000, OutputTokensPerMinute: 8000},
//	})
//	...
//	err = t.Start(ctx)
//	defer t.Stop(context.Background())
//	client := anthropic.NewClient(option.WithHTTPClient(&http.Client{Transport: t}))
//	ctx, cancel := context.WithTimeout(sluice.WithPriority(ctx, sluice.High), 20*time.Second)
//	msg, err := client.Messages.New(ctx, params)
//
// Upstream is the gateway's own upstream config (package upstream): an
// entry of the gateway's upstreams: list (docs/config.md) decodes into it;
// a zero field takes its Profile's value, else its default. A request waits in its class's queue
// until it is admitted, its context's deadline or the class's MaxWait,
// whichever comes first; a request that cannot be admitted before its
// deadline is refused at once with the provider's 429.
//
// The gateway (sluice serve) and the durable job queue are built on the
// same engine; see docs/engine.md.
package sluice

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// WithPriority returns ctx carrying priority p for requests sent through a
// Transport. It takes precedence over the X-Priority header; without
// either a request is Normal.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return frontdoor.WithPriority(ctx, llm.Priority(p))
}

// WithClient returns ctx naming the caller, for round-robin fairness
// between callers of the same class. It takes precedence over the
// X-Sluice-Client header.
func WithClient(ctx context.Context, client string) context.Context {
	return frontdoor.WithClient(ctx, client)
}

// Clock is the time source of a Transport's engine (see WithClock): every
// wait, deadline and quota refill is measured on it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a Timer that fires after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's timer, like time.Timer.
type Timer interface {
	// C returns the channel the timer's time is sent on.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset changes the timer to fire after d; it reports whether the
	// timer had been active.
	Reset(d time.Duration) bool
}

// Option configures a Transport beyond its Upstream.
type Option func(*options)

type options struct {
	httpClient *http.Client
	clock      Clock
	observer   Observer
}

// WithHTTPClient sets the client that sends upstream requests. Defaults to
// one with http.DefaultTransport, whose response-header timeout is
// Upstream.RequestTimeout, and no overall timeout (streams may be long).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithClock sets the engine's time source, e.g. a fake clock in tests.
// Defaults to the wall clock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// clockAdapter lets a public Clock drive the engine.
type clockAdapter struct{ c Clock }

func (a clockAdapter) Now() time.Time                       { return a.c.Now() }
func (a clockAdapter) NewTimer(d time.Duration) clock.Timer { return a.c.NewTimer(d) }

// Transport is an http.RoundTripper that sends requests through Sluice's
// engine for one upstream. Start it before use and Stop it when done.
//
// It builds each request as the gateway does (same header rules, X-Priority,
// X-Sluice-Deadline, else X-Stainless-Timeout) and answers a request Sluice
// refuses or gives up on in the provider's error shape with retry-after,
// retry-after-ms and x-should-retry: false; see docs/http-api.md.
type Transport struct {
	d *dispatch.Dispatcher
	t *frontdoor.Transport
}

// NewTransport returns a Transport for cfg, or an error naming the invalid
// field by its YAML path (e.g. `upstream "a": retry.base_delay: must be <=
// retry.max_delay`).
func NewTransport(cfg Upstream, opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(cfg.Fallbacks) > 0 || len(cfg.FallbackClasses) > 0 {
		return nil, fmt.Errorf("upstream %q: fallbacks: a Transport has one upstream; fallbacks are the gateway's (sluice serve)", cfg.Name)
	}
	dc := dispatch.Config{Config: cfg, HTTPClient: o.httpClient}
	if o.clock != nil {
		dc.Clock = clockAdapter{o.clock}
	}
	if o.observer != nil {
		dc.Observer = observerAdapter{o: o.observer}
	}
	d, err := dispatch.New(dc)
	if err != nil {
		return nil, err
	}
	return &Transport{d: d, t: frontdoor.NewTransport(d)}, nil
}

// Start starts the engine. It runs until Stop (ctx bounds the start
// only); a second Start, or a Start after Stop, is an error.
func (t *Transport) Start(ctx context.Context) error { return t.d.Start(ctx) }

// Stop stops the engine; queued requests fail with a provider-shaped 503.
// It is idempotent and safe before Start.
func (t *Transport) Stop(ctx context.Context) error { return t.d.Stop(ctx) }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) { return t.t.RoundTrip(req) }

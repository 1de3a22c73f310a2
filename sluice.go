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
//		BaseURL:  "https://api.anthropic.com",
//		APIKey:   os.Getenv("ANTHROPIC_API_KEY"),
//		Limits:   sluice.Limits{RequestsPerMinute: 50, InputTokensPerMinute: 30000, OutputTokensPerMinute: 8000},
//	})
//	...
//	err = t.Start(ctx)
//	defer t.Stop(context.Background())
//	client := anthropic.NewClient(option.WithHTTPClient(&http.Client{Transport: t}))
//	msg, err := client.Messages.New(sluice.WithPriority(ctx, sluice.High), params)
//
// The gateway (sluice serve) and the durable job queue are built on the
// same engine; see docs/engine.md.
package sluice

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// Upstream configures one provider endpoint: its protocol, URL, key,
// quotas, and the engine's tuning. Every field has a documented default
// except Name, Protocol and BaseURL.
type Upstream = dispatch.Config

// Limits are an upstream's per-minute quotas and concurrency cap.
type Limits = dispatch.Limits

// Protocol names a provider wire protocol.
type Protocol = llm.Protocol

// The supported protocols.
const (
	Anthropic = llm.Anthropic
	OpenAI    = llm.OpenAI
)

// Priority is a request's scheduling class.
type Priority = llm.Priority

// The priority classes, most urgent first. Under saturation they share the
// upstream 8:4:2:1 by default.
const (
	Critical = llm.Critical
	High     = llm.High
	Normal   = llm.Normal
	Low      = llm.Low
)

// WithPriority returns ctx carrying priority p for requests sent through a
// Transport. It takes precedence over the X-Priority header.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return frontdoor.WithPriority(ctx, p)
}

// WithClient returns ctx naming the caller, for round-robin fairness
// between callers of the same class. It takes precedence over the
// X-Sluice-Client header.
func WithClient(ctx context.Context, client string) context.Context {
	return frontdoor.WithClient(ctx, client)
}

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
// field.
func NewTransport(cfg Upstream) (*Transport, error) {
	d, err := dispatch.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{d: d, t: frontdoor.NewTransport(d)}, nil
}

// Start starts the engine.
func (t *Transport) Start(ctx context.Context) error { return t.d.Start(ctx) }

// Stop stops the engine; queued requests fail with a provider-shaped 503.
// It is idempotent.
func (t *Transport) Stop(ctx context.Context) error { return t.d.Stop(ctx) }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) { return t.t.RoundTrip(req) }

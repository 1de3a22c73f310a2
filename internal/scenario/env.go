package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/upstream"
)

// API keys the in-process gateway uses upstream; the naive client uses the
// same ones, so both runs are counted per key by the mock.
const (
	anthropicKey = "sk-ant-bench"
	openAIKey    = "sk-bench-openai"
	// clientKey is what load generators send to the gateway (no clients are
	// configured, so any key is accepted on loopback).
	clientKey = "bench-client"
	// Upstream names under which the gateway serves the two protocols.
	anthropicUpstream = "anthropic"
	openAIUpstream    = "openai"
)

// stopTimeout bounds the shutdown of in-process servers.
const stopTimeout = 10 * time.Second

// startMock starts a mock provider on a free loopback port.
func startMock(ctx context.Context, cfg mock.Config) (*mock.Server, error) {
	cfg.Listen = "127.0.0.1:0"
	m, err := mock.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating mock: %w", err)
	}
	if err := m.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting mock: %w", err)
	}
	return m, nil
}

// gatewaySetup is how the in-process gateway shapes one upstream.
type gatewaySetup struct {
	// limits are the quotas configured for the anthropic upstream (what an
	// operator copies from the provider console).
	limits upstream.Limits
	// outputReservation is the anthropic upstream's output_reservation;
	// "" leaves the gateway's default.
	outputReservation string
	// openAITPM, when positive, adds an openai upstream with this TPM.
	openAITPM int64
	// openAIUnlimited, when openAITPM is 0, adds an openai upstream with no
	// limits configured.
	openAIUnlimited bool
	// profile is the anthropic upstream's profile; "" leaves the
	// gateway's default.
	profile upstream.Profile
}

// startGateway starts the gateway on a free loopback port, its upstreams
// pointing at mockURL, with its own defaults for everything not set.
func startGateway(ctx context.Context, mockURL string, g gatewaySetup) (*server.Server, error) {
	cfg := server.Config{
		Listen:        "127.0.0.1:0",
		Store:         server.StoreNone, // the proxy routes need no job queue
		ShutdownGrace: stopTimeout,
		Upstreams: []upstream.Config{{
			Name: anthropicUpstream, Protocol: llm.Anthropic, BaseURL: mockURL, APIKey: anthropicKey, Limits: g.limits,
			OutputReservation: g.outputReservation, Profile: g.profile,
		}},
	}
	if g.openAITPM > 0 {
		cfg.Upstreams = append(cfg.Upstreams, upstream.Config{
			Name: openAIUpstream, Protocol: llm.OpenAI, BaseURL: mockURL, APIKey: openAIKey,
			Limits: upstream.Limits{RequestsPerMinute: g.limits.RequestsPerMinute, TokensPerMinute: g.openAITPM},
		})
	} else if g.openAIUnlimited {
		cfg.Upstreams = append(cfg.Upstreams, upstream.Config{
			Name: openAIUpstream, Protocol: llm.OpenAI, BaseURL: mockURL, APIKey: openAIKey,
		})
	}
	gw, err := server.New(cfg, server.WithLogger(slog.New(slog.DiscardHandler)), server.WithTransport(newTransport()))
	if err != nil {
		return nil, fmt.Errorf("creating gateway: %w", err)
	}
	if err := gw.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting gateway: %w", err)
	}
	return gw, nil
}

// newTransport returns a loopback transport that keeps enough idle
// connections for the benchmark's concurrency, so connection set-up is not
// what is measured.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.MaxConnsPerHost = 0
	return t
}

// stopper stops things in reverse order of their start.
type stopper []func(context.Context) error

func (s *stopper) add(f func(context.Context) error) { *s = append(*s, f) }

// stop stops everything, the last started first, on a context that
// outlives the benchmark's own (which may already be cancelled).
func (s stopper) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	var errs []error
	for i := len(s) - 1; i >= 0; i-- {
		errs = append(errs, s[i](ctx))
	}
	return errors.Join(errs...)
}

package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
)

// stateLog is an upstream's dispatch.StateObserver: it logs each state
// change once, when it happens (docs/observability.md, "Logs"), where
// the request lines only say what each request met. Keys appear as
// fingerprints, never as secrets.
type stateLog struct {
	log      *slog.Logger
	upstream string
}

var _ dispatch.StateObserver = stateLog{}

func (s stateLog) BreakerChanged(from, to flow.BreakerState) {
	level := slog.LevelInfo
	if to == flow.Open {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "breaker "+to.String(), "upstream", s.upstream, "from", from.String(), "to", to.String())
}

func (s stateLog) Paused(key string, until time.Time, pause time.Duration, hinted bool) {
	source := "backoff"
	if hinted {
		source = "provider"
	}
	s.log.Warn("upstream paused by a 429", "upstream", s.upstream, "key", key,
		"pause_ms", pause.Milliseconds(), "until", until.UTC().Format(time.RFC3339Nano), "hint", source)
}

func (s stateLog) LimitsLearned(key string, dim flow.Dim, limit float64) {
	s.log.Info("limit learned from headers", "upstream", s.upstream, "key", key, "dimension", dim.String(), "limit", limit)
}

func (s stateLog) KeyOut(key, reason string, probeIn time.Duration) {
	s.log.Warn("key taken out of the pool", "upstream", s.upstream, "key", key, "reason", reason, "probe_in", probeIn.String())
}

func (s stateLog) KeyBack(key string, outFor time.Duration) {
	s.log.Info("key back in the pool", "upstream", s.upstream, "key", key, "out_for", outFor.Round(time.Second).String())
}

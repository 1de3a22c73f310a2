package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
)

func init() {
	register(command{
		name:    "mock",
		summary: "run the mock LLM provider (Anthropic Messages + OpenAI Chat Completions) with quotas, faults and latency",
		usage:   "[flags]",
		run:     runMock,
	})
}

// mockStopTimeout bounds the graceful shutdown after SIGINT/SIGTERM.
const mockStopTimeout = 10 * time.Second

// outageFlags collects repeated --outage START+DURATION[:STATUS] values.
type outageFlags []mock.Outage

func (o *outageFlags) String() string {
	parts := make([]string, len(*o))
	for i, x := range *o {
		parts[i] = fmt.Sprintf("%v+%v:%d", x.Start, x.Duration, x.Status)
	}
	return strings.Join(parts, ",")
}

func (o *outageFlags) Set(v string) error {
	spec, status, hasStatus := strings.Cut(v, ":")
	startS, durS, ok := strings.Cut(spec, "+")
	if !ok {
		return fmt.Errorf("want START+DURATION[:STATUS], e.g. 30s+10s:529, got %q", v)
	}
	start, err := time.ParseDuration(startS)
	if err != nil {
		return fmt.Errorf("outage start: %w", err)
	}
	dur, err := time.ParseDuration(durS)
	if err != nil {
		return fmt.Errorf("outage duration: %w", err)
	}
	out := mock.Outage{Start: start, Duration: dur}
	if hasStatus {
		if out.Status, err = strconv.Atoi(status); err != nil {
			return fmt.Errorf("outage status: %w", err)
		}
	}
	*o = append(*o, out)
	return nil
}

func runMock(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	var (
		cfgFile  = fs.String("config", "", "YAML config file (see docs/mock.md); flags given explicitly override it, and flag defaults apply only without it")
		listen   = fs.String("listen", mock.ListenDefault, "address to listen on (127.0.0.1:0 picks a free port)")
		preset   = fs.String("preset", "", "limit table: "+strings.Join(mock.PresetNames(), ", ")+" (--rpm etc. override it)")
		rpm      = fs.Int64("rpm", 0, "requests per minute per API key (0 = unlimited)")
		itpm     = fs.Int64("itpm", 0, "Anthropic input tokens per minute per API key (0 = unlimited)")
		otpm     = fs.Int64("otpm", 0, "Anthropic output tokens per minute per API key (0 = unlimited)")
		tpm      = fs.Int64("tpm", 0, "OpenAI tokens (input+output) per minute per API key (0 = unlimited)")
		ctRPM    = fs.Int64("count-tokens-rpm", 0, "token-counting requests per minute per API key (Anthropic count_tokens, OpenAI responses/input_tokens), a bucket of its own (0 = unlimited)")
		burst    = fs.Float64("burst-seconds", mock.BurstSecondsDefault, "bucket depth in seconds of refill (60 = a full minute, 1 = per-second enforcement)")
		otpmMode = fs.String("otpm-mode", mock.OTPMReserve, "Anthropic OTPM accounting: reserve_max_tokens (2025 docs) or realtime (2026 docs)")
		countRej = fs.Bool("count-rejected", true, "a 429 still costs one request token")
		orgID    = fs.String("org-id", mock.OrgIDDefault, "organization id reported in headers and 429 messages")
		ttft     = fs.Duration("ttft", 200*time.Millisecond, "time to first output token")
		perToken = fs.Duration("per-token", 2*time.Millisecond, "time per further output token")
		outMin   = fs.Int64("output-min", mock.OutputTokensMinDefault, "shortest generated reply in tokens")
		outMax   = fs.Int64("output-max", 0, "longest generated reply in tokens (0 = the request's max_tokens)")
		seed     = fs.Uint64("seed", 0, "seed for generated replies and injected faults")
		overload = fs.Float64("overload-rate", 0, "probability of an overload answer (Anthropic 529, OpenAI 503)")
		stormLen = fs.Duration("overload-burst", 0, "mean length of correlated overload storms (with --overload-gap)")
		stormGap = fs.Duration("overload-gap", 0, "mean calm time between overload storms (with --overload-burst)")
		olRetry  = fs.Duration("overload-retry-after", 0, "add retry-after (rounded up to seconds) to overload answers")
		shouldRt = fs.Bool("should-retry", false, "add x-should-retry to injected errors")
		errRate  = fs.Float64("error-rate", 0, "probability of a 500/502/503/504 answer")
		htmlRate = fs.Float64("html-error-rate", mock.HTMLErrorRateDefault, "share of injected 502/503 sent as an edge proxy's HTML page (negative = never)")
		strRate  = fs.Float64("stream-error-rate", 0, "probability that a stream fails with an overloaded error event")
		strAfter = fs.Int("stream-error-after", 0, "content deltas sent before an injected stream error")
		rstRate  = fs.Float64("reset-rate", 0, "probability that the connection is reset instead of answered")
		slowRate = fs.Float64("slow-rate", 0, "probability that a reply is delayed by --slow-extra")
		slowXtra = fs.Duration("slow-extra", 0, "added latency of a slow reply")
		spendCap = fs.Bool("spend-cap", false, "answer everything with the terminal spend-cap 429")
		flexRate = fs.Float64("flex-unavailable-rate", 0, "probability that an OpenAI flex-tier request gets the uncharged 429 resource_unavailable")
		maxBody  = fs.Int64("max-body-bytes", mock.MaxBodyBytesDefault, "largest request body accepted (larger gets 413)")
		outages  outageFlags
	)
	fs.Var(&outages, "outage", "scheduled outage START+DURATION[:STATUS] after start, e.g. 30s+10s or 1m+5s:503 (repeatable; status defaults to 529)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var cfg mock.Config
	if *cfgFile != "" {
		c, err := mock.LoadConfig(*cfgFile)
		if err != nil {
			return err
		}
		cfg = c
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	use := func(name string) bool { return *cfgFile == "" || set[name] }
	apply := []struct {
		name string
		fn   func()
	}{
		{"listen", func() { cfg.Listen = *listen }},
		{"preset", func() { cfg.Preset = *preset }},
		{"rpm", func() { cfg.Limits.RPM = *rpm }},
		{"itpm", func() { cfg.Limits.ITPM = *itpm }},
		{"otpm", func() { cfg.Limits.OTPM = *otpm }},
		{"tpm", func() { cfg.Limits.TPM = *tpm }},
		{"count-tokens-rpm", func() { cfg.Limits.CountTokensRPM = *ctRPM }},
		{"burst-seconds", func() { cfg.BurstSeconds = *burst }},
		{"otpm-mode", func() { cfg.OTPMMode = *otpmMode }},
		{"count-rejected", func() { cfg.CountRejected = countRej }},
		{"org-id", func() { cfg.OrgID = *orgID }},
		{"ttft", func() { cfg.TTFT = *ttft }},
		{"per-token", func() { cfg.PerToken = *perToken }},
		{"output-min", func() { cfg.OutputTokens.Min = *outMin }},
		{"output-max", func() { cfg.OutputTokens.Max = *outMax }},
		{"seed", func() { cfg.Seed = *seed }},
		{"overload-rate", func() { cfg.Faults.OverloadRate = *overload }},
		{"overload-burst", func() { cfg.Faults.OverloadBurst = *stormLen }},
		{"overload-gap", func() { cfg.Faults.OverloadGap = *stormGap }},
		{"overload-retry-after", func() { cfg.Faults.OverloadRetryAfter = *olRetry }},
		{"should-retry", func() { cfg.Faults.ShouldRetry = *shouldRt }},
		{"error-rate", func() { cfg.Faults.ErrorRate = *errRate }},
		{"html-error-rate", func() { cfg.Faults.HTMLErrorRate = *htmlRate }},
		{"stream-error-rate", func() { cfg.Faults.StreamErrorRate = *strRate }},
		{"stream-error-after", func() { cfg.Faults.StreamErrorAfter = *strAfter }},
		{"reset-rate", func() { cfg.Faults.ResetRate = *rstRate }},
		{"slow-rate", func() { cfg.Faults.SlowRate = *slowRate }},
		{"slow-extra", func() { cfg.Faults.SlowExtra = *slowXtra }},
		{"spend-cap", func() { cfg.Faults.SpendCap = *spendCap }},
		{"flex-unavailable-rate", func() { cfg.Faults.FlexUnavailableRate = *flexRate }},
		{"max-body-bytes", func() { cfg.MaxBodyBytes = *maxBody }},
		{"outage", func() { cfg.Faults.Outages = outages }},
	}
	for _, a := range apply {
		if use(a.name) {
			a.fn()
		}
	}
	s, err := mock.New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("starting mock: %w", err)
	}
	l := s.Limits()
	fmt.Fprintf(out, "sluice mock listening on %s (rpm=%d itpm=%d otpm=%d tpm=%d, 0 = unlimited)\n", s.URL(), l.RPM, l.ITPM, l.OTPM, l.TPM)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mockStopTimeout)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Fprintln(out, "sluice mock stopped")
	return nil
}

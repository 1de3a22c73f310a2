package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/scenario"
)

// traceFlags are the flags of `sluice bench trace`. Only the flags given
// are passed on: the scenario's own defaults (and its --quick sizes) fill
// the rest.
type traceFlags struct {
	traces                          []string
	from, window, timeout, batchTO  *time.Duration
	ttft, perToken                  *time.Duration
	speed, tokenScale, burstSeconds *float64
	batch, limits, profile          *string
	batchMean                       *int
}

func addTraceFlags(fs *flag.FlagSet) *traceFlags {
	tf := &traceFlags{}
	fs.Func("trace", "trace: a service to replay, NAME_OR_FILE[:class[:token-scale]] (repeatable; built-ins "+builtinTraceNames()+
		"; default azure-code:critical and azure-conv:high)", func(s string) error {
		tf.traces = append(tf.traces, s)
		return nil
	})
	tf.from = fs.Duration("from", 0, "trace: where in the traces the window starts (default 13m with the default traces, else 0)")
	tf.window = fs.Duration("window", scenario.ReplayWindowDefault, "trace: how much of each trace is replayed")
	tf.speed = fs.Float64("speed", 1, "trace: compress time by X (limits multiplied, arrivals, reply times, bucket depth and timeouts divided)")
	tf.tokenScale = fs.Float64("token-scale", 1, "trace: multiply every trace request's input and output tokens")
	tf.batch = fs.String("batch", strconv.Itoa(scenario.ReplayBatchDefault), "trace: N[:class] requests sent at the start (class default low; 0 for none)")
	tf.batchMean = fs.Int("batch-mean", scenario.ReplayBatchInputMeanDefault, "trace: the batch's mean input tokens (heavy-tailed around it)")
	tf.limits = fs.String("limits", "", "trace: the mock's limits on one key, rpm,itpm,otpm (k and M suffixes allowed; default 4000,2M,400k, Anthropic Tier 4 Sonnet)")
	tf.burstSeconds = fs.Float64("burst-seconds", scenario.ReplayBurstSecondsDefault, "trace: the mock's bucket depth in seconds of refill")
	tf.profile = fs.String("profile", "balanced", "trace: the gateway's profile, balanced, latency or throughput")
	tf.timeout = fs.Duration("timeout", scenario.ReplayTimeoutDefault, "trace: how long an interactive client waits")
	tf.batchTO = fs.Duration("batch-timeout", scenario.ReplayBatchTimeoutDefault, "trace: how long a batch client waits")
	tf.ttft = fs.Duration("ttft", scenario.ReplayTTFTDefault, "trace: the mock's time to first token")
	tf.perToken = fs.Duration("per-token", scenario.ReplayPerTokenDefault, "trace: the mock's time per further output token")
	return tf
}

func builtinTraceNames() string {
	var names []string
	for _, b := range scenario.BuiltinTraces() {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

// options converts the flags given into the scenario's options; preset is
// --preset, a mock limit table here.
func (tf *traceFlags) options(fs *flag.FlagSet, preset string) (scenario.ReplayOptions, error) {
	var ro scenario.ReplayOptions
	given := func(name string) bool { return flagGiven(fs, name) }
	for _, s := range tf.traces {
		spec, err := parseTraceSpec(s)
		if err != nil {
			return ro, err
		}
		ro.Traces = append(ro.Traces, spec)
	}
	durations := []struct {
		name     string
		v        *time.Duration
		dst      *time.Duration
		zeroOK   bool
		positive string
	}{
		{"from", tf.from, &ro.From, true, ">= 0"},
		{"window", tf.window, &ro.Window, false, "positive"},
		{"timeout", tf.timeout, &ro.Timeout, false, "positive"},
		{"batch-timeout", tf.batchTO, &ro.BatchTimeout, false, "positive"},
		{"ttft", tf.ttft, &ro.TTFT, false, "positive"},
		{"per-token", tf.perToken, &ro.PerToken, false, "positive"},
	}
	for _, d := range durations {
		if !given(d.name) {
			continue
		}
		if *d.v < 0 || (*d.v == 0 && !d.zeroOK) {
			return ro, fmt.Errorf("%w: --%s must be %s, got %v", errUsage, d.name, d.positive, *d.v)
		}
		*d.dst = *d.v
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
		max  float64
	}{{"speed", tf.speed, &ro.Speed, 1000}, {"token-scale", tf.tokenScale, &ro.TokenScale, 1000}, {"burst-seconds", tf.burstSeconds, &ro.BurstSeconds, 3600}} {
		if !given(f.name) {
			continue
		}
		if !(*f.v > 0 && *f.v <= f.max) {
			return ro, fmt.Errorf("%w: --%s must be in (0, %g], got %v", errUsage, f.name, f.max, *f.v)
		}
		*f.dst = *f.v
	}
	if given("batch") {
		n, class, err := parseBatch(*tf.batch)
		if err != nil {
			return ro, err
		}
		ro.Batch, ro.BatchClass = n, class
	}
	if given("batch-mean") {
		if *tf.batchMean < 1 || *tf.batchMean > 100_000 {
			return ro, fmt.Errorf("%w: --batch-mean must be in [1, 100000], got %d", errUsage, *tf.batchMean)
		}
		ro.BatchInputMean = *tf.batchMean
	}
	switch {
	case given("limits") && preset != "":
		return ro, fmt.Errorf("%w: give --limits or --preset, not both", errUsage)
	case given("limits"):
		l, err := parseLimits(*tf.limits)
		if err != nil {
			return ro, err
		}
		ro.Limits = l
	case preset != "":
		l, err := mock.Preset(preset)
		if err != nil {
			return ro, fmt.Errorf("%w: --preset: %w", errUsage, err)
		}
		if l.TPM > 0 {
			return ro, fmt.Errorf("%w: --preset %s is an OpenAI table; the replay speaks Anthropic (RPM, ITPM, OTPM)", errUsage, preset)
		}
		ro.Limits = l
	}
	ro.Profile = *tf.profile // checked with the other options when the scenario starts
	return ro, nil
}

// parseTraceSpec reads --trace (scenario.ParseTraceSpec) and checks that
// it names a built-in trace or an existing file.
func parseTraceSpec(s string) (scenario.TraceSpec, error) {
	spec, err := scenario.ParseTraceSpec(s)
	if err != nil {
		return spec, fmt.Errorf("%w: --trace %q: %w", errUsage, s, err)
	}
	for _, b := range scenario.BuiltinTraces() {
		if b.Name == spec.Source {
			return spec, nil
		}
	}
	if _, err := os.Stat(spec.Source); err != nil {
		return spec, fmt.Errorf("%w: --trace %q: no such built-in trace (%s) or file", errUsage, s, builtinTraceNames())
	}
	return spec, nil
}

// parseBatch reads --batch N[:class]; 0 sends no batch.
func parseBatch(s string) (int, string, error) {
	n, class, err := scenario.ParseBatchSpec(s)
	if err != nil {
		return 0, "", fmt.Errorf("%w: --batch %q: %w", errUsage, s, err)
	}
	if n == 0 {
		return scenario.ReplayNoBatch, "", nil
	}
	return n, class, nil
}

// parseLimits reads --limits rpm,itpm,otpm: integers >= 0 (0 =
// unlimited), with an optional k (thousand) or M (million) suffix.
func parseLimits(s string) (mock.Limits, error) {
	bad := fmt.Errorf("%w: --limits wants rpm,itpm,otpm as integers >= 0 (k and M suffixes allowed), got %q", errUsage, s)
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return mock.Limits{}, bad
	}
	var v [3]int64
	for i, x := range f {
		x = strings.TrimSpace(x)
		mult := 1.0
		switch {
		case strings.HasSuffix(x, "k"), strings.HasSuffix(x, "K"):
			mult, x = 1e3, x[:len(x)-1]
		case strings.HasSuffix(x, "M"):
			mult, x = 1e6, x[:len(x)-1]
		}
		n, err := strconv.ParseFloat(x, 64)
		if err != nil || !(n >= 0) || n*mult > 1e12 || n*mult != math.Trunc(n*mult) {
			return mock.Limits{}, bad
		}
		v[i] = int64(n * mult)
	}
	if v == [3]int64{} {
		return mock.Limits{}, fmt.Errorf("%w: --limits: at least one limit must be positive, got %q", errUsage, s)
	}
	return mock.Limits{RPM: v[0], ITPM: v[1], OTPM: v[2]}, nil
}

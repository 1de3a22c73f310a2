package scenario

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// GoodputPresetIssue11 is issue 11's 600-request case: input ~N(500,100)
// and output ~N(150,30) tokens, max_tokens 200, 64 at a time, against RPM
// 3000 / ITPM 300k / OTPM 60k with a 10 s bucket depth.
const GoodputPresetIssue11 = "issue11-600"

// GoodputPresets name the goodput scenario's sizes other than its own
// (sluice bench goodput --preset NAME), with what each runs.
var GoodputPresets = map[string]string{
	GoodputPresetIssue11: "600 requests, input ~N(500,100), output ~N(150,30) tokens, max_tokens 200, 64 at a time; RPM 3000, ITPM 300k, OTPM 60k, 10 s depth",
}

func goodputPresetNames() []string {
	return slices.Sorted(maps.Keys(GoodputPresets))
}

// goodputParams size the goodput scenario.
type goodputParams struct {
	limits       mock.Limits
	depthSeconds float64
	workload     Workload
	output       mock.OutputRange
	workers      int
}

func goodputSetup(o Options) goodputParams {
	p := goodputParams{
		limits:       mock.Limits{RPM: 3000, ITPM: 300_000, OTPM: 60_000},
		depthSeconds: 10,
		workload: Workload{Requests: 1500, Mix: Mix{0, 0, 1, 0}, InputTokensMin: 450, InputTokensMax: 550,
			MaxTokens: 200, Seed: o.Seed},
		output:  mock.OutputRange{Min: 100, Max: 200},
		workers: 64,
	}
	switch {
	case o.Quick:
		p.limits = mock.Limits{RPM: 6000, ITPM: 600_000, OTPM: 60_000}
		p.workload.Requests, p.workload.InputTokensMin, p.workload.InputTokensMax, p.workload.MaxTokens = 120, 90, 110, 40
		p.output = mock.OutputRange{Min: 20, Max: 40}
		p.depthSeconds = 1
	case o.GoodputPreset == GoodputPresetIssue11:
		p.workload.Requests = 600
		p.workload.InputTokensMin, p.workload.InputTokensMax, p.workload.InputTokensStdDev = 100, 900, 100
		p.output = mock.OutputRange{Min: 1, Mean: 150, StdDev: 30}
	}
	if o.Requests > 0 {
		p.workload.Requests = o.Requests
	}
	if o.MaxTokens > 0 {
		p.workload.MaxTokens = o.MaxTokens
		if p.output.StdDev == 0 {
			p.output.Max = min(p.output.Max, int64(o.MaxTokens))
			p.output.Min = min(p.output.Min, p.output.Max)
		}
	}
	return p
}

// describe says how a workload's input and the mock's output are drawn.
func (p goodputParams) describe() (input, output string) {
	w, r := p.workload, p.output
	input = fmt.Sprintf("%d-%d", w.InputTokensMin, w.InputTokensMax)
	if w.InputTokensStdDev > 0 {
		input = fmt.Sprintf("~N(%d,%g)", (w.InputTokensMin+w.InputTokensMax)/2, w.InputTokensStdDev)
	}
	output = fmt.Sprintf("%d-%d", r.Min, r.Max)
	if r.StdDev > 0 {
		output = fmt.Sprintf("~N(%g,%g) cut at max_tokens", r.Mean, r.StdDev)
	}
	return input, output
}

// Goodput targets (issue 11): the share of the ideal's pace the gateway
// must drain at, with the limits configured and with them learned from
// the provider's headers.
const (
	GoodputTarget        = 0.98
	GoodputTargetLearned = 0.95
)

// runGoodput drains a fixed closed-loop workload through a quota-limited
// provider and compares the drain time with IdealDrain.
func runGoodput(ctx context.Context, o Options) (*Result, error) {
	p := goodputSetup(o)
	items, err := Generate(p.workload)
	if err != nil {
		return nil, err
	}
	otpm := o.OTPMMode
	if otpm == "" && o.OutputReservation == upstream.OutputReservationLearned {
		otpm = mock.OTPMRealtime // a provider that reserves max_tokens needs the gateway to as well
	}
	mcfg := mock.Config{Limits: p.limits, BurstSeconds: p.depthSeconds, Seed: o.Seed, OTPMMode: otpm,
		OutputTokens: p.output, TTFT: 100 * time.Millisecond, PerToken: time.Millisecond}
	if o.Quick {
		mcfg.TTFT, mcfg.PerToken = 5*time.Millisecond, 0
	}
	drive := func(ctx context.Context, send sender) []Outcome {
		return runClosedLoop(ctx, o.Clock, items, p.workers, send)
	}
	o.progress("goodput: %d requests, %d at a time, through the gateway and with the naive client", len(items), p.workers)
	gw := &gatewaySetup{outputReservation: o.OutputReservation}
	gwLimits := "limits set to the mock's"
	if o.LearnLimits {
		gwLimits = "no limits configured (learned from the mock's rate-limit headers)"
	} else {
		gw.limits = upstream.Limits{RequestsPerMinute: p.limits.RPM,
			InputTokensPerMinute: p.limits.ITPM, OutputTokensPerMinute: p.limits.OTPM}
	}
	sl, nv, err := runBoth(ctx, o, true,
		sideConfig{name: "sluice", mock: mcfg, gateway: gw, run: drive},
		sideConfig{name: "naive", mock: mcfg, naive: NaiveConfig{Concurrency: p.workers}, run: drive})
	if err != nil {
		return nil, err
	}

	input, output := p.describe()
	reservation := cmp.Or(o.OutputReservation, upstream.OutputReservationDefault)
	r := &Result{Setup: []string{
		fmt.Sprintf("mock: RPM %d, ITPM %d, OTPM %d (%s), bucket depth %gs, TTFT %v + %v/token, output %s tokens",
			p.limits.RPM, p.limits.ITPM, p.limits.OTPM, cmp.Or(otpm, mock.OTPMReserve), p.depthSeconds, mcfg.TTFT, mcfg.PerToken, output),
		fmt.Sprintf("workload: %d requests of %s input tokens, max_tokens %d, %d at a time (closed loop)",
			len(items), input, p.workload.MaxTokens, p.workers),
		fmt.Sprintf("gateway: %s, output_reservation: %s; every other setting at its default (burst 5s learned up from the headers, safety margin 0.995 until a 429, 0.98 after)",
			gwLimits, reservation),
		fmt.Sprintf("naive: %d in flight, %d attempts, retry-after honoured, else full-jitter backoff from %v",
			p.workers, NaiveMaxAttemptsDefault, NaiveBaseDelayDefault),
	}}
	// The ideal uses what the provider actually admitted in the Sluice run.
	adm := sl.stats.Overall.Admitted
	ideal, binding := IdealDrain([]DimNeed{
		{Name: "requests", Total: float64(len(items)), PerMinute: float64(p.limits.RPM)},
		{Name: "input tokens", Total: float64(adm.InputTokens), PerMinute: float64(p.limits.ITPM)},
		{Name: "output tokens", Total: float64(adm.OutputTokens), PerMinute: float64(p.limits.OTPM)},
	}, p.depthSeconds)
	t := Table{Header: []string{"", "sluice", "naive"}}
	row := func(name string, f func(s side) string) { t.Rows = append(t.Rows, []string{name, f(sl), f(nv)}) }
	stats := map[string]runStats{"sluice": summarizeRun(sl.outs), "naive": summarizeRun(nv.outs)}
	row("drain time", func(s side) string { return secs(stats[s.name].elapsed) })
	row("ideal (full burst)", func(side) string { return secs(ideal) })
	row("ideal / drain", func(s side) string {
		if f := failures(s.outs); f > 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", ideal.Seconds()/stats[s.name].elapsed.Seconds())
	})
	row("vs ideal", func(s side) string {
		if f := failures(s.outs); f > 0 {
			return fmt.Sprintf("n/a (%d failed)", f) // finishing early by failing is not draining
		}
		return fmt.Sprintf("%+.1f%%", 100*(stats[s.name].elapsed.Seconds()/ideal.Seconds()-1))
	})
	row("succeeded", func(s side) string { return fmt.Sprint(stats[s.name].ok) })
	row("failed", func(s side) string { return fmt.Sprint(failures(s.outs)) })
	row("provider 429s", func(s side) string { n, _ := providerRejections(s.stats.Overall); return fmt.Sprint(n) })
	row("latency p50", func(s side) string { return ms(stats[s.name].latency.P50) })
	row("latency p99", func(s side) string { return ms(stats[s.name].latency.P99) })
	row("tokens in/out", func(s side) string {
		a := s.stats.Overall.Admitted
		return fmt.Sprintf("%d/%d", a.InputTokens, a.OutputTokens)
	})
	r.Tables = append(r.Tables, t)

	slDrain := stats["sluice"].elapsed
	s429, _ := providerRejections(sl.stats.Overall)
	n429, _ := providerRejections(nv.stats.Overall)
	r.figure("ideal_drain_s", ideal.Seconds())
	r.figure("sluice_drain_s", slDrain.Seconds())
	r.figure("naive_drain_s", stats["naive"].elapsed.Seconds())
	r.figure("sluice_provider_429", float64(s429))
	r.figure("naive_provider_429", float64(n429))
	r.figure("sluice_failures", float64(failures(sl.outs)))
	r.figure("naive_failures", float64(failures(nv.outs)))
	r.figure("sluice_ratio", ideal.Seconds()/slDrain.Seconds())
	target := GoodputTarget
	if o.LearnLimits {
		target = GoodputTargetLearned
	}
	r.check(fmt.Sprintf("drain at >= %.2f of the ideal's pace", target), fmt.Sprintf("<= %s", secs(time.Duration(float64(ideal)/target))),
		fmt.Sprintf("%s (%.3f)", secs(slDrain), ideal.Seconds()/slDrain.Seconds()), ideal > 0 && slDrain.Seconds()*target <= ideal.Seconds())
	r.check("provider 429s <= 0.5% of requests", fmt.Sprintf("<= %d", len(items)/200), fmt.Sprint(s429), s429 <= int64(len(items)/200))
	r.check("zero failures seen by clients", "0", fmt.Sprint(failures(sl.outs)), failures(sl.outs) == 0)
	r.Notes = append(r.Notes,
		fmt.Sprintf("ideal = max over dims of max(0, need_d - depth_d)/rate_d with depth_d = %gs x rate_d; binding: %s, ideal %s (needs from the provider's admitted totals)",
			p.depthSeconds, binding, secs(ideal)),
		"drain time runs from the first request sent to the last answer read, so it includes one request's latency that the ideal does not")
	if f := firstFailure(sl.outs); f != "" {
		r.Notes = append(r.Notes, "first sluice failure: "+f)
	}
	return r, nil
}

package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/upstream"
)

// goodputParams size the goodput scenario.
type goodputParams struct {
	limits       mock.Limits
	depthSeconds float64
	workload     Workload
	workers      int
}

func goodputSetup(o Options) goodputParams {
	p := goodputParams{
		limits:       mock.Limits{RPM: 3000, ITPM: 300_000, OTPM: 60_000},
		depthSeconds: 10,
		workload: Workload{Requests: 1500, Mix: Mix{0, 0, 1, 0}, InputTokensMin: 450, InputTokensMax: 550,
			MaxTokens: 200, Seed: o.Seed},
		workers: 64,
	}
	if o.Quick {
		p.limits = mock.Limits{RPM: 6000, ITPM: 600_000, OTPM: 60_000}
		p.workload.Requests, p.workload.InputTokensMin, p.workload.InputTokensMax, p.workload.MaxTokens = 120, 90, 110, 40
		p.depthSeconds = 1
	}
	if o.Requests > 0 {
		p.workload.Requests = o.Requests
	}
	return p
}

// runGoodput drains a fixed closed-loop workload through a quota-limited
// provider and compares the drain time with IdealDrain.
func runGoodput(ctx context.Context, o Options) (*Result, error) {
	p := goodputSetup(o)
	items, err := Generate(p.workload)
	if err != nil {
		return nil, err
	}
	mcfg := mock.Config{Limits: p.limits, BurstSeconds: p.depthSeconds, Seed: o.Seed,
		OutputTokens: mock.OutputRange{Min: int64(p.workload.MaxTokens) / 2, Max: int64(p.workload.MaxTokens)},
		TTFT:         100 * time.Millisecond, PerToken: time.Millisecond}
	if o.Quick {
		mcfg.TTFT, mcfg.PerToken = 5*time.Millisecond, 0
	}
	drive := func(ctx context.Context, send sender) []Outcome {
		return runClosedLoop(ctx, o.Clock, items, p.workers, send)
	}
	o.progress("goodput: %d requests, %d at a time, through the gateway and with the naive client", len(items), p.workers)
	gw := &gatewaySetup{limits: upstream.Limits{RequestsPerMinute: p.limits.RPM,
		InputTokensPerMinute: p.limits.ITPM, OutputTokensPerMinute: p.limits.OTPM}}
	sl, nv, err := runBoth(ctx, o, true,
		sideConfig{name: "sluice", mock: mcfg, gateway: gw, run: drive},
		sideConfig{name: "naive", mock: mcfg, naive: NaiveConfig{Concurrency: p.workers}, run: drive})
	if err != nil {
		return nil, err
	}

	r := &Result{Setup: []string{
		fmt.Sprintf("mock: RPM %d, ITPM %d, OTPM %d, bucket depth %gs, TTFT %v + %v/token, output %d-%d tokens",
			p.limits.RPM, p.limits.ITPM, p.limits.OTPM, p.depthSeconds, mcfg.TTFT, mcfg.PerToken, mcfg.OutputTokens.Min, mcfg.OutputTokens.Max),
		fmt.Sprintf("workload: %d requests of %d-%d input tokens, max_tokens %d, %d at a time (closed loop)",
			len(items), p.workload.InputTokensMin, p.workload.InputTokensMax, p.workload.MaxTokens, p.workers),
		"gateway: limits set to the mock's; every other setting at its default (burst 5s learned up from the headers, safety margin 0.995 until a 429, 0.98 after)",
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
	r.check("drain at >= 0.98 of the ideal's pace", fmt.Sprintf("<= %s", secs(time.Duration(float64(ideal)/0.98))),
		fmt.Sprintf("%s (%.3f)", secs(slDrain), ideal.Seconds()/slDrain.Seconds()), ideal > 0 && slDrain.Seconds()*0.98 <= ideal.Seconds())
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

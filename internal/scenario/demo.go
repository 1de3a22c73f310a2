package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// Price is a model's list price in US dollars per million tokens.
type Price struct {
	Model          string
	InputPerMTok   float64
	OutputPerMTok  float64
	upstreamAPIKey string
}

// Prices are the list prices the demo's cost estimate uses: Claude Sonnet
// 4.5 at $3 / $15 and GPT-4.1 at $2 / $8 per million input / output tokens
// (the providers' published prices in 2025; cache and batch discounts are
// ignored).
var Prices = []Price{
	{Model: AnthropicModelDefault, InputPerMTok: 3, OutputPerMTok: 15, upstreamAPIKey: anthropicKey},
	{Model: OpenAIModelDefault, InputPerMTok: 2, OutputPerMTok: 8, upstreamAPIKey: openAIKey},
}

// cost prices what the provider admitted, per key.
func cost(st mock.Stats) float64 {
	var usd float64
	for _, p := range Prices {
		a := st.Keys[p.upstreamAPIKey].Admitted
		usd += (float64(a.InputTokens)*p.InputPerMTok + float64(a.OutputTokens)*p.OutputPerMTok) / 1e6
	}
	return usd
}

// demoBurstSeconds is the demo provider's bucket depth in seconds of refill.
const demoBurstSeconds = 10

// Demo sends a mixed workload through the gateway to a simulated provider
// with tier-like limits, a little random overload and a short outage, and
// the same workload with the naive client to a fresh identical mock, at
// the same time, then reports both side by side.
func Demo(ctx context.Context, o Options) (*Result, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("demo options: %w", err)
	}
	start := o.Clock.Now()
	n := RequestsDefault
	rate := 50.0
	outageAt, outageLen := 8*time.Second, 3*time.Second
	if o.Quick {
		n, rate, outageAt, outageLen = 300, 40, 3*time.Second, 2*time.Second
	}
	if o.Requests > 0 {
		n = o.Requests
	}
	limits := mock.Limits{RPM: 3000, ITPM: 120_000, OTPM: 30_000, TPM: 150_000}
	items, err := Generate(Workload{Requests: n, Mix: MixDefault, InputTokensMin: 40, InputTokensMax: 80, MaxTokens: 48,
		StreamShare: 0.25, OpenAIShare: 0.10, Rate: rate, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	mcfg := mock.Config{Limits: limits, BurstSeconds: demoBurstSeconds, Seed: o.Seed,
		OutputTokens: mock.OutputRange{Min: 5, Max: 35},
		TTFT:         100 * time.Millisecond, PerToken: time.Millisecond,
		Faults: mock.Faults{OverloadRate: 0.02,
			Outages: []mock.Outage{{Start: outageAt, Duration: outageLen, Status: 529}}}}
	gw := &gatewaySetup{limits: upstream.Limits{RequestsPerMinute: limits.RPM, InputTokensPerMinute: limits.ITPM,
		OutputTokensPerMinute: limits.OTPM}, openAITPM: limits.TPM}
	slCount, nvCount := &answerCount{name: "sluice"}, &answerCount{name: "naive"}
	drive := func(c *answerCount) func(ctx context.Context, send sender) []Outcome {
		return func(ctx context.Context, send sender) []Outcome {
			return runOpenLoop(ctx, o.Clock, items, c.counted(send))
		}
	}
	o.progress("demo: %d requests arriving at %.0f/s for about %s, through Sluice and with a naive client, side by side...",
		n, rate, secs(items[len(items)-1].At))
	stopProgress := reportProgress(ctx, o, n, demoProgressEvery, slCount, nvCount)
	sl, nv, err := runBoth(ctx, o, true,
		sideConfig{name: "sluice", mock: mcfg, gateway: gw, run: drive(slCount)},
		sideConfig{name: "naive", mock: mcfg, naive: NaiveConfig{}, run: drive(nvCount)})
	stopProgress()
	if err != nil {
		return nil, fmt.Errorf("running demo: %w", err)
	}
	r := &Result{Name: "demo", Setup: []string{
		fmt.Sprintf("provider (in-process mock): RPM %d, ITPM %d, OTPM %d (OpenAI TPM %d), 10s bucket depth,",
			limits.RPM, limits.ITPM, limits.OTPM, limits.TPM),
		fmt.Sprintf("  TTFT 100ms + 1ms/token, 2%% random 529s, every request 529 from %v to %v", outageAt, outageAt+outageLen),
		fmt.Sprintf("workload: %d requests, Poisson arrivals at %.0f/s, 10/20/50/20%% critical/high/normal/low,", n, rate),
		"  25% streaming, 10% OpenAI chat completions, 40-80 input tokens, 5-35 output tokens (max_tokens 48)",
		fmt.Sprintf("naive client: %d in flight, %d attempts, jittered backoff, honours retry-after; Sluice: limits configured, rest default",
			NaiveConcurrencyDefault, NaiveMaxAttemptsDefault),
	}}
	stats := map[string]runStats{"sluice": summarizeRun(sl.outs), "naive": summarizeRun(nv.outs)}
	sl429, _ := providerRejections(sl.stats.Overall)
	nv429, _ := providerRejections(nv.stats.Overall)
	r.Verdict = demoVerdict(stats["sluice"], stats["naive"], sl429, nv429, nv.naive.Retries)
	r.Tables = append(r.Tables, classTable("Latency from arrival to full answer, per class", stats, []string{"sluice", "naive"}))
	t := Table{Title: "Side by side", Header: []string{"", "sluice", "naive"}}
	row := func(name string, f func(s side) string) { t.Rows = append(t.Rows, []string{name, f(sl), f(nv)}) }
	row("succeeded", func(s side) string {
		rs := stats[s.name]
		return fmt.Sprintf("%d/%d (%s)", rs.ok, rs.all, pct(float64(rs.ok)/float64(max(rs.all, 1))))
	})
	row("wall time", func(s side) string { return secs(stats[s.name].elapsed) })
	lastArrival := items[len(items)-1].At
	floor := map[string]time.Duration{}
	floorRatio := map[string]float64{}
	for _, s := range []side{sl, nv} {
		floor[s.name] = demoFloor(s.stats, limits, lastArrival)
		floorRatio[s.name] = floor[s.name].Seconds() / max(stats[s.name].elapsed.Seconds(), 1e-9)
	}
	row("provider's floor", func(s side) string { return secs(floor[s.name]) })
	row("floor / wall time", func(s side) string { return fmt.Sprintf("%.3f", floorRatio[s.name]) })
	row("throughput", func(s side) string { return fmt.Sprintf("%.1f req/s", stats[s.name].throughput()) })
	row("provider 429s", func(s side) string { n, _ := providerRejections(s.stats.Overall); return fmt.Sprint(n) })
	row("provider 529s/503s", func(s side) string { _, n := providerRejections(s.stats.Overall); return fmt.Sprint(n) })
	row("retries", func(s side) string {
		if s.metrics != nil {
			return fmt.Sprint(int64(s.metrics.sum("sluice_retries_total", nil)))
		}
		return fmt.Sprint(s.naive.Retries)
	})
	row("breaker opens", func(s side) string {
		if s.metrics != nil {
			return fmt.Sprint(int64(s.metrics.sum("sluice_breaker_transitions_total", map[string]string{"to": "open"})))
		}
		return "-"
	})
	row("tokens in / out", func(s side) string {
		a := s.stats.Overall.Admitted
		return fmt.Sprintf("%d / %d", a.InputTokens, a.OutputTokens)
	})
	row("estimated cost", func(s side) string { return fmt.Sprintf("$%.4f", cost(s.stats)) })
	r.Tables = append(r.Tables, t)
	for _, s := range []side{sl, nv} {
		rs := stats[s.name]
		r.figure(s.name+"_floor_ratio", floorRatio[s.name])
		r429, ov := providerRejections(s.stats.Overall)
		r.figure(s.name+"_ok", float64(rs.ok))
		r.figure(s.name+"_failed", float64(rs.all-rs.ok))
		r.figure(s.name+"_throughput", rs.throughput())
		r.figure(s.name+"_provider_429", float64(r429))
		r.figure(s.name+"_provider_overload", float64(ov))
		r.figure(s.name+"_cost_usd", cost(s.stats))
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("cost uses list prices per million tokens: %s $%g in / $%g out, %s $%g in / $%g out, on the tokens the provider admitted",
			Prices[0].Model, Prices[0].InputPerMTok, Prices[0].OutputPerMTok, Prices[1].Model, Prices[1].InputPerMTok, Prices[1].OutputPerMTok),
		"provider figures come from the mock's own counts (GET /mock/stats); Sluice's retries and breaker opens from its /metrics",
		"provider's floor: the least wall time in which the provider's buckets (full at the start) could admit what it admitted on that side, and never before the last arrival; "+
			"when a quota binds (the output quota, in the full run), a client that serves fewer requests has a lower floor")
	if f := firstFailure(sl.outs); f != "" {
		r.Notes = append(r.Notes, "first sluice failure: "+f)
	}
	r.Elapsed = o.Clock.Now().Sub(start)
	return r, nil
}

// demoFloor is the least wall time in which the demo's provider could
// have admitted what st shows it admitted: each key's buckets start full
// (10 s deep) and refill at their limits (IdealDrain); the Anthropic key
// has RPM, ITPM and OTPM, the OpenAI key RPM and TPM. Never before the
// last request arrived.
func demoFloor(st mock.Stats, l mock.Limits, lastArrival time.Duration) time.Duration {
	a, o := st.Keys[anthropicKey].Admitted, st.Keys[openAIKey].Admitted
	an, _ := IdealDrain([]DimNeed{
		{Name: "requests", Total: float64(a.Requests), PerMinute: float64(l.RPM)},
		{Name: "input tokens", Total: float64(a.InputTokens), PerMinute: float64(l.ITPM)},
		{Name: "output tokens", Total: float64(a.OutputTokens), PerMinute: float64(l.OTPM)},
	}, demoBurstSeconds)
	oa, _ := IdealDrain([]DimNeed{
		{Name: "requests", Total: float64(o.Requests), PerMinute: float64(l.RPM)},
		{Name: "tokens", Total: float64(o.InputTokens + o.OutputTokens), PerMinute: float64(l.TPM)},
	}, demoBurstSeconds)
	return max(an, oa, lastArrival)
}

package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// FairShares splits capacity among classes by weighted max-min fairness
// (water-filling): a class that asks for less than its weighted share of
// what is left gets all it asks for, and the rest is shared again among the
// others by weight. Classes with zero weight or demand get nothing.
func FairShares(capacity float64, demand, weights [llm.NumPriorities]float64) [llm.NumPriorities]float64 {
	var share [llm.NumPriorities]float64
	var done [llm.NumPriorities]bool
	left := max(capacity, 0)
	for {
		var wsum float64
		for c := range weights {
			if !done[c] && weights[c] > 0 && demand[c] > 0 {
				wsum += weights[c]
			}
		}
		if wsum == 0 || left <= 0 {
			return share
		}
		capped := false
		for c := range weights {
			if done[c] || weights[c] <= 0 || demand[c] <= 0 {
				continue
			}
			if fair := left * weights[c] / wsum; demand[c] <= fair {
				share[c], done[c], capped = demand[c], true, true
			}
		}
		if !capped {
			for c := range weights {
				if !done[c] && weights[c] > 0 && demand[c] > 0 {
					share[c] = left * weights[c] / wsum
				}
			}
			return share
		}
		left = capacity
		for c := range share {
			if done[c] {
				left -= share[c]
			}
		}
	}
}

// shareTolerance is the allowance on a class's weighted share: per-class
// completions in a minute number in the tens, so counts vary by several
// percent from run to run.
const shareTolerance = 0.10

// runPriority overloads the provider at twice its sustainable rate with the
// default class mix and checks that critical stays fast and that every
// class keeps its weighted share.
func runPriority(ctx context.Context, o Options) (*Result, error) {
	limits := mock.Limits{RPM: 600, ITPM: 120_000, OTPM: 30_000}
	depth := 10.0
	in, maxTok := 500, 200
	outMean := float64(maxTok) * 3 / 4
	dur := LoadDurationDefault
	unloadedN := 40
	if o.Quick {
		limits = mock.Limits{RPM: 1200, ITPM: 120_000, OTPM: 30_000}
		depth, in, maxTok, outMean, dur, unloadedN = 5, 100, 40, 30, 2*time.Second, 5
	}
	if o.Duration > 0 {
		dur = o.Duration
	}
	// Sustainable request rate: the tightest dimension.
	sustainable := min(float64(limits.RPM)/60, float64(limits.ITPM)/60/float64(in), float64(limits.OTPM)/60/outMean)
	rate := 2 * sustainable
	mcfg := mock.Config{Limits: limits, BurstSeconds: depth, Seed: o.Seed,
		OutputTokens: mock.OutputRange{Min: int64(maxTok) / 2, Max: int64(maxTok)},
		TTFT:         100 * time.Millisecond, PerToken: time.Millisecond}
	gw := &gatewaySetup{limits: upstream.Limits{RequestsPerMinute: limits.RPM,
		InputTokensPerMinute: limits.ITPM, OutputTokensPerMinute: limits.OTPM}}

	// Unloaded: critical requests one at a time.
	o.progress("priority: unloaded critical latency (%d requests, one at a time)", unloadedN)
	calm, err := Generate(Workload{Requests: unloadedN, Mix: Mix{1, 0, 0, 0}, InputTokensMin: in * 9 / 10,
		InputTokensMax: in * 11 / 10, MaxTokens: maxTok, Seed: o.Seed + 1})
	if err != nil {
		return nil, err
	}
	base, err := runSide(ctx, o, sideConfig{name: "sluice", mock: mcfg, gateway: gw,
		run: func(ctx context.Context, send sender) []Outcome { return runClosedLoop(ctx, o.Clock, calm, 1, send) }})
	if err != nil {
		return nil, fmt.Errorf("unloaded run: %w", err)
	}
	baseStats := summarizeRun(base.outs)
	unloadedP95 := baseStats.perClass[llm.Critical].latency.P95

	n := int(rate * dur.Seconds())
	items, err := Generate(Workload{Requests: n, Mix: MixDefault, InputTokensMin: in * 9 / 10, InputTokensMax: in * 11 / 10,
		MaxTokens: maxTok, Rate: rate, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	drive := func(ctx context.Context, send sender) []Outcome { return runOpenLoop(ctx, o.Clock, items, send) }
	o.progress("priority: %d requests arriving at %.2f/s (2x sustainable) for %v, gateway then naive", n, rate, dur)
	sl, nv, err := runBoth(ctx, o, false,
		sideConfig{name: "sluice", mock: mcfg, gateway: gw, run: drive},
		sideConfig{name: "naive", mock: mcfg, naive: NaiveConfig{}, run: drive})
	if err != nil {
		return nil, err
	}

	r := &Result{Setup: []string{
		fmt.Sprintf("mock: RPM %d, ITPM %d, OTPM %d, bucket depth %gs, TTFT 100ms + 1ms/token, output %d-%d tokens",
			limits.RPM, limits.ITPM, limits.OTPM, depth, mcfg.OutputTokens.Min, mcfg.OutputTokens.Max),
		fmt.Sprintf("load: Poisson arrivals at %.2f req/s = 2 x sustainable %.2f req/s for %v (%d requests), mix 10/20/50/20, ~%d input tokens",
			rate, sustainable, dur, n, in),
		"gateway: limits set to the mock's, class weights 8/4/2/1 (defaults); runs one after the other, each on a fresh mock",
	}}
	stats := map[string]runStats{"sluice": summarizeRun(sl.outs), "naive": summarizeRun(nv.outs)}
	r.Tables = append(r.Tables, Table{Title: "Unloaded (sluice, critical, one at a time)",
		Header: []string{"requests", "ok", "p50", "p95", "p99"},
		Rows: [][]string{{fmt.Sprint(baseStats.all), fmt.Sprint(baseStats.ok), ms(baseStats.perClass[llm.Critical].latency.P50),
			ms(unloadedP95), ms(baseStats.perClass[llm.Critical].latency.P99)}}})
	r.Tables = append(r.Tables, classTable("Under 2x overload (latency from arrival to full answer)", stats, []string{"sluice", "naive"}))

	// Throughput per class in the steady part of the overload: from the
	// moment the full bucket of the start is surely spent to the end of
	// the arrivals. Offered counts arrivals in the window, served counts
	// answers in it, so a class served at its arrival rate scores 1.
	from, to := dur/6, dur
	span := (to - from).Seconds()
	var demand, got [llm.NumPriorities]float64
	var total float64
	for _, it := range items {
		if it.At >= from && it.At < to {
			demand[it.Priority] += 1 / span
		}
	}
	for _, oc := range sl.outs {
		if oc.OK() && oc.End >= from && oc.End < to {
			got[oc.Item.Priority] += 1 / span
			total += 1 / span
		}
	}
	share := FairShares(total, demand, upstream.WeightsDefault)
	st := Table{Title: fmt.Sprintf("Sluice throughput per class from %v to %v (weighted max-min share of the measured total)", from, to),
		Header: []string{"class", "offered/s", "served/s", "share/s", "served/share"}}
	sharesMet := true
	worst, lowest := "", -1.0
	for c := range llm.NumPriorities {
		ratio := 0.0
		if share[c] > 0 {
			ratio = got[c] / share[c]
		}
		st.Rows = append(st.Rows, []string{llm.Priority(c).String(), fmt.Sprintf("%.2f", demand[c]), fmt.Sprintf("%.2f", got[c]),
			fmt.Sprintf("%.2f", share[c]), fmt.Sprintf("%.2f", ratio)})
		r.figure("served_per_s_"+llm.Priority(c).String(), got[c])
		r.figure("share_per_s_"+llm.Priority(c).String(), share[c])
		if share[c] > 0 && (lowest < 0 || ratio < lowest) {
			lowest = ratio
		}
		if share[c] > 0 && ratio < 1-shareTolerance {
			sharesMet = false
			worst += fmt.Sprintf("%s %.2f ", llm.Priority(c), ratio)
		}
	}
	r.Tables = append(r.Tables, st)

	loadedP95 := stats["sluice"].perClass[llm.Critical].latency.P95
	r.figure("unloaded_critical_p95_ms", float64(unloadedP95)/1e6)
	r.figure("sluice_critical_p95_ms", float64(loadedP95)/1e6)
	r.figure("naive_critical_p95_ms", float64(stats["naive"].perClass[llm.Critical].latency.P95)/1e6)
	r.figure("sluice_failures", float64(failures(sl.outs)))
	r.figure("naive_failures", float64(failures(nv.outs)))
	ratio := float64(loadedP95) / float64(max(unloadedP95, 1))
	r.check("critical p95 within 1.5x unloaded", fmt.Sprintf("<= %s", ms(time.Duration(float64(unloadedP95)*1.5))),
		fmt.Sprintf("%s (%.2fx)", ms(loadedP95), ratio), unloadedP95 > 0 && ratio <= 1.5)
	measured := fmt.Sprintf("lowest %.2f", lowest)
	if !sharesMet {
		measured = "below: " + strings.TrimSpace(worst)
	}
	r.check("every class keeps its weighted share of throughput", fmt.Sprintf("served/share >= %.2f", 1-shareTolerance), measured, sharesMet)
	r.Notes = append(r.Notes,
		fmt.Sprintf("the share allows %.0f%% for count noise; offered/s counts arrivals and served/s answers between %v and %v", 100*shareTolerance, from, to),
		fmt.Sprintf("sluice failures %d, naive failures %d", failures(sl.outs), failures(nv.outs)))
	if f := firstFailure(sl.outs); f != "" {
		r.Notes = append(r.Notes, "first sluice failure: "+f)
	}
	return r, nil
}

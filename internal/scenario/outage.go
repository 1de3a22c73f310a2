package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// Outage scenario targets.
const (
	// maxProbesPerSecond is "a few probes per second" while the breaker is
	// open: answers of any kind the provider gives in one second.
	maxProbesPerSecond = 5
	// recoveryTarget is how soon after the outage the provider must be
	// serving at the pre-outage rate again.
	recoveryTarget = 5 * time.Second
)

// perSecond is one second of a run as the provider saw it.
type perSecond struct {
	from      time.Duration
	answers   int64 // answers of any status
	successes int64 // 200s
	// open is true when the breaker was not closed at any sample in the
	// second.
	open bool
}

// bySecond turns cumulative samples into per-second deltas, one per whole
// second starting at the first sample.
func bySecond(samples []sample) []perSecond {
	if len(samples) == 0 {
		return nil
	}
	var out []perSecond
	startIdx := 0
	for i := 1; i < len(samples); i++ {
		if samples[i].at-samples[startIdx].at < time.Second {
			continue
		}
		a, b := samples[startIdx], samples[i]
		ps := perSecond{from: a.at, answers: b.total() - a.total(), successes: b.byStatus["200"] - a.byStatus["200"], open: true}
		for _, s := range samples[startIdx : i+1] {
			if s.breaker == "" || s.breaker == "closed" {
				ps.open = false
			}
		}
		out = append(out, ps)
		startIdx = i
	}
	return out
}

// runOutage sends half the sustainable load through a 15 s overload outage.
func runOutage(ctx context.Context, o Options) (*Result, error) {
	limits := mock.Limits{RPM: 600, ITPM: 120_000, OTPM: 30_000}
	in, maxTok := 500, 200
	outMean := float64(maxTok) * 3 / 4
	before, outageLen, after := 20*time.Second, 15*time.Second, 25*time.Second
	deadline := 60 * time.Second
	if o.Quick {
		before, outageLen, after, deadline = 3*time.Second, 2*time.Second, 3*time.Second, 20*time.Second
	}
	sustainable := min(float64(limits.RPM)/60, float64(limits.ITPM)/60/float64(in), float64(limits.OTPM)/60/outMean)
	rate := sustainable / 2
	total := before + outageLen + after
	n := int(rate * total.Seconds())
	items, err := Generate(Workload{Requests: n, Mix: MixDefault, InputTokensMin: in * 9 / 10, InputTokensMax: in * 11 / 10,
		MaxTokens: maxTok, Rate: rate, Seed: o.Seed})
	if err != nil {
		return nil, err
	}
	mcfg := mock.Config{Limits: limits, BurstSeconds: 10, Seed: o.Seed,
		OutputTokens: mock.OutputRange{Min: int64(maxTok) / 2, Max: int64(maxTok)},
		TTFT:         100 * time.Millisecond, PerToken: time.Millisecond,
		Faults: mock.Faults{Outages: []mock.Outage{{Start: before, Duration: outageLen, Status: 529}}}}
	gw := &gatewaySetup{limits: upstream.Limits{RequestsPerMinute: limits.RPM,
		InputTokensPerMinute: limits.ITPM, OutputTokensPerMinute: limits.OTPM}}
	drive := func(ctx context.Context, send sender) []Outcome { return runOpenLoop(ctx, o.Clock, items, send) }
	o.progress("outage: %d requests at %.2f/s, 529s from %v to %v, gateway and naive side by side", n, rate, before, before+outageLen)
	every := 100 * time.Millisecond
	sl, nv, err := runBoth(ctx, o, true,
		sideConfig{name: "sluice", mock: mcfg, gateway: gw, deadline: deadline, run: drive, sampleEvery: every},
		sideConfig{name: "naive", mock: mcfg, naive: NaiveConfig{}, run: drive, sampleEvery: every})
	if err != nil {
		return nil, err
	}

	r := &Result{Setup: []string{
		fmt.Sprintf("mock: RPM %d, ITPM %d, OTPM %d, depth 10s, TTFT 100ms + 1ms/token; every answer 529 from %v to %v",
			limits.RPM, limits.ITPM, limits.OTPM, before, before+outageLen),
		fmt.Sprintf("load: Poisson at %.2f req/s (half of sustainable %.2f) for %v, %d requests, X-Sluice-Deadline %v",
			rate, sustainable, total, n, deadline),
		"gateway: limits set to the mock's, breaker and retries at their defaults",
	}}
	outEnd := before + outageLen
	// Requests whose deadline outlasts the outage: they may end after it.
	eligible := func(s side) (n, failed int) {
		for _, oc := range s.outs {
			if oc.Start+deadline > outEnd+recoveryTarget {
				n++
				if !oc.OK() {
					failed++
				}
			}
		}
		return n, failed
	}
	slSec, nvSec := bySecond(sl.samples), bySecond(nv.samples)
	// Pre-outage success rate (after the first seconds' burst of the full
	// bucket has passed).
	preRate := func(secs []perSecond) float64 {
		var sum float64
		var k int
		for _, s := range secs {
			if s.from >= before/4 && s.from+time.Second <= before {
				sum += float64(s.successes)
				k++
			}
		}
		if k == 0 {
			return 0
		}
		return sum / float64(k)
	}
	// Recovery: from the outage's end to the end of the first second whose
	// successes reach the pre-outage rate.
	recovery := func(secs []perSecond) (time.Duration, bool) {
		want := preRate(secs)
		for _, s := range secs {
			if s.from+time.Second <= outEnd {
				continue
			}
			if float64(s.successes) >= want && s.successes > 0 {
				return max(s.from+time.Second-outEnd, 0), true
			}
		}
		return 0, false
	}
	maxProbe := func(secs []perSecond) (maxN int64, openSecs int) {
		for _, s := range secs {
			if s.open && s.from >= before && s.from+time.Second <= outEnd {
				maxN = max(maxN, s.answers)
				openSecs++
			}
		}
		return maxN, openSecs
	}
	duringOutage := func(secs []perSecond) (maxN int64) {
		for _, s := range secs {
			if s.from >= before+time.Second && s.from+time.Second <= outEnd {
				maxN = max(maxN, s.answers)
			}
		}
		return maxN
	}
	t := Table{Header: []string{"", "sluice", "naive"}}
	stats := map[string]runStats{"sluice": summarizeRun(sl.outs), "naive": summarizeRun(nv.outs)}
	row := func(name string, f func(s side, secs []perSecond) string) {
		t.Rows = append(t.Rows, []string{name, f(sl, slSec), f(nv, nvSec)})
	}
	row("requests", func(s side, _ []perSecond) string { return fmt.Sprint(len(s.outs)) })
	row("client-visible failures", func(s side, _ []perSecond) string { return fmt.Sprint(failures(s.outs)) })
	row("provider 529s", func(s side, _ []perSecond) string {
		_, ov := providerRejections(s.stats.Overall)
		return fmt.Sprint(ov)
	})
	row("max provider answers/s in outage", func(_ side, ps []perSecond) string { return fmt.Sprint(duringOutage(ps)) })
	row("pre-outage successes/s", func(_ side, ps []perSecond) string { return fmt.Sprintf("%.2f", preRate(ps)) })
	row("recovery after outage", func(_ side, ps []perSecond) string {
		if d, ok := recovery(ps); ok {
			return secs(d)
		}
		return "never"
	})
	row("backlog answered after outage", func(s side, _ []perSecond) string { return secs(backlogCleared(s.outs, outEnd)) })
	row("latency p50", func(s side, _ []perSecond) string { return ms(stats[s.name].latency.P50) })
	row("latency p99", func(s side, _ []perSecond) string { return ms(stats[s.name].latency.P99) })
	r.Tables = append(r.Tables, t)

	nElig, failedElig := eligible(sl)
	probes, openSecs := maxProbe(slSec)
	rec, recOK := recovery(slSec)
	_, nvFailedElig := eligible(nv)
	r.figure("sluice_failures_eligible", float64(failedElig))
	r.figure("naive_failures_eligible", float64(nvFailedElig))
	r.figure("sluice_max_answers_per_s_while_open", float64(probes))
	r.figure("sluice_open_seconds", float64(openSecs))
	r.figure("sluice_recovery_s", rec.Seconds())
	if d, ok := recovery(nvSec); ok {
		r.figure("naive_recovery_s", d.Seconds())
	}
	r.check("no failure for requests whose deadline outlasts the outage", fmt.Sprintf("0 of %d", nElig),
		fmt.Sprint(failedElig), failedElig == 0)
	r.check("few probes reach the provider while the breaker is open", fmt.Sprintf("<= %d answers/s", maxProbesPerSecond),
		fmt.Sprintf("max %d/s over %d open seconds", probes, openSecs), openSecs > 0 && probes <= maxProbesPerSecond)
	recMeasured := "never"
	if recOK {
		recMeasured = secs(rec)
	}
	r.check("pre-outage rate again soon after recovery", fmt.Sprintf("<= %v", recoveryTarget), recMeasured, recOK && rec <= recoveryTarget)
	r.Notes = append(r.Notes,
		"per-second figures are provider-side (the mock's answer counts), sampled every 100ms; a second counts as open when no sample in it saw the breaker closed",
		"recovery = end of the first whole second after the outage whose provider-side successes reach the pre-outage mean")
	if f := firstFailure(sl.outs); f != "" {
		r.Notes = append(r.Notes, "first sluice failure: "+f)
	}
	return r, nil
}

// backlogCleared is how long after outEnd the last request that arrived
// before it was answered (0 if all were answered before).
func backlogCleared(outs []Outcome, outEnd time.Duration) time.Duration {
	var last time.Duration
	for _, o := range outs {
		if o.Start < outEnd {
			last = max(last, o.End-outEnd)
		}
	}
	return last
}

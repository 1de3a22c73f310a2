package scenario

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// Trace replay targets (issue 22), measured side by side in one run.
const (
	// ReplayCriticalTarget and ReplayHighTarget bound critical's and
	// high's p95 as a multiple of their unloaded p95.
	ReplayCriticalTarget = 1.2
	ReplayHighTarget     = 1.5
	// Replay429Target bounds provider 429s as a share of the requests
	// sent upstream.
	Replay429Target = 0.001
	// ReplayDrainTarget bounds the batch's drain as a multiple of the
	// burst-room oracle's.
	ReplayDrainTarget = 1.1
)

// replayRun is one column of the report: a run or an oracle.
type replayRun struct {
	// key prefixes its figures; label names it in tables.
	key, label string
	outs       []Outcome
	// stats are the mock's, nil for an oracle.
	stats *mock.Stats
}

// replayFigures are one run's derived figures.
type replayFigures struct {
	rs runStats
	// span is from the start to the last answer.
	span time.Duration
	// input is what the provider admitted; used its share of the most the
	// input bucket could admit over span.
	input int64
	used  float64
	// r429 and upstream are provider 429s and all answers upstream.
	r429, upstream int64
	// Batch: drain from the first send to the last answer, served count.
	drain        time.Duration
	batchServed  int
	interactFail int
}

func (p *replayPlan) figures(run replayRun) replayFigures {
	f := replayFigures{rs: summarizeRun(run.outs)}
	var first, last time.Duration
	batchSeen := false
	for _, o := range run.outs {
		f.span = max(f.span, o.End)
		if o.Item.Group != p.batchGroup {
			if !o.OK() {
				f.interactFail++
			}
			continue
		}
		if !batchSeen || o.Start < first {
			first = o.Start
		}
		last, batchSeen = max(last, o.End), true
		if o.OK() {
			f.batchServed++
		}
	}
	f.drain = last - first
	if run.stats != nil {
		f.input = run.stats.Overall.Admitted.InputTokens
		f.r429, _ = providerRejections(run.stats.Overall)
		for _, n := range run.stats.Overall.ByStatus {
			f.upstream += n
		}
	} else {
		for _, o := range run.outs {
			if o.OK() {
				f.input += int64(o.Item.InputTokens)
				f.upstream++
			}
		}
	}
	if p.limits.ITPM > 0 && f.span > 0 {
		rate := float64(p.limits.ITPM) / 60
		f.used = float64(f.input) / (rate*p.depthSeconds + rate*f.span.Seconds())
	}
	return f
}

// report prints the runs side by side with the targets.
func (p *replayPlan) report(runs []replayRun) *Result {
	r := &Result{Setup: p.setup()}
	figs := map[string]replayFigures{}
	for _, run := range runs {
		figs[run.key] = p.figures(run)
	}
	unloaded := figs["unloaded"].rs
	t := Table{Title: "Latency per class, from arrival to the full answer (served requests; failed = client timeouts and errors)",
		Header: []string{"run", "class", "requests", "served", "failed", "p50", "p95", "p99", "p95 / unloaded"}}
	for _, run := range runs {
		rs := figs[run.key].rs
		for c := range llm.NumPriorities {
			cs := rs.perClass[c]
			if cs.count == 0 {
				continue
			}
			name := run.key + "_" + llm.Priority(c).String()
			ratio := "-"
			if base := unloaded.perClass[c].latency.P95; p.interactive[c] && run.key != "unloaded" && base > 0 {
				v := float64(cs.latency.P95) / float64(base)
				ratio = fmt.Sprintf("%.2fx", v)
				r.figure(name+"_p95_ratio", v)
			}
			l := cs.latency
			t.Rows = append(t.Rows, []string{run.label, llm.Priority(c).String(), fmt.Sprint(cs.count), fmt.Sprint(cs.ok),
				fmt.Sprint(cs.count - cs.ok), ms(l.P50), ms(l.P95), ms(l.P99), ratio})
			r.figure(name+"_p50_ms", msFloat(l.P50))
			r.figure(name+"_p95_ms", msFloat(l.P95))
			r.figure(name+"_p99_ms", msFloat(l.P99))
			r.figure(name+"_served", float64(cs.ok))
			r.figure(name+"_failed", float64(cs.count-cs.ok))
		}
	}
	r.Tables = append(r.Tables, t, p.heavyTail(r, runs))

	cols := []string{"naive", "sluice", "oracle_strict", "oracle_room"}
	labels := map[string]string{}
	for _, run := range runs {
		labels[run.key] = run.label
	}
	q := Table{Title: "Provider, quota and batch", Header: []string{""}}
	for _, k := range cols {
		q.Header = append(q.Header, labels[k])
	}
	row := func(name string, f func(k string, v replayFigures) string) {
		cells := []string{name}
		for _, k := range cols {
			cells = append(cells, f(k, figs[k]))
		}
		q.Rows = append(q.Rows, cells)
	}
	row("provider 429s", func(_ string, v replayFigures) string { return fmt.Sprint(v.r429) })
	row("requests sent upstream", func(_ string, v replayFigures) string { return fmt.Sprint(v.upstream) })
	row("interactive failures", func(_ string, v replayFigures) string { return fmt.Sprint(v.interactFail) })
	row("input tokens admitted", func(_ string, v replayFigures) string { return commas(v.input) })
	row("input quota used", func(_ string, v replayFigures) string { return pct(v.used) })
	roomDrain := figs["oracle_room"].drain
	if p.batchGroup >= 0 {
		n := p.ro.Batch
		row("batch served", func(_ string, v replayFigures) string { return fmt.Sprintf("%d / %d", v.batchServed, n) })
		row("batch drain", func(_ string, v replayFigures) string { return secs(v.drain) })
		row("drain / burst-room oracle's", func(_ string, v replayFigures) string {
			if roomDrain <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", v.drain.Seconds()/roomDrain.Seconds())
		})
	}
	r.Tables = append(r.Tables, q)
	for _, k := range cols {
		v := figs[k]
		if k == "naive" || k == "sluice" {
			r.figure(k+"_provider_429", float64(v.r429))
			r.figure(k+"_upstream_requests", float64(v.upstream))
		}
		r.figure(k+"_interactive_failed", float64(v.interactFail))
		r.figure(k+"_input_utilisation", v.used)
		if p.batchGroup >= 0 {
			r.figure(k+"_batch_drain_s", v.drain.Seconds())
			r.figure(k+"_batch_served", float64(v.batchServed))
		}
	}
	if p.batchGroup >= 0 && roomDrain > 0 {
		r.figure("sluice_batch_drain_ratio", figs["sluice"].drain.Seconds()/roomDrain.Seconds())
	}
	var interactiveInput int64
	for _, s := range p.services {
		if !s.batch {
			interactiveInput += s.input
		}
	}
	if p.limits.ITPM > 0 {
		r.figure("interactive_input_share", float64(interactiveInput)/(float64(p.ro.Limits.ITPM)*p.ro.Window.Minutes()))
	}
	p.checks(r, figs)
	r.Notes = append(r.Notes,
		"oracle: a simulation on the mock's bucket model (same limits, depth and output accounting) of a scheduler that knows every request's exact tokens and has no network: "+
			"strict priority (a class's head that does not fit stops the scan, FIFO within a class); burst room: high leaves 10 % and normal and low 95 % of each bucket's depth unused after admission (a larger request waits for a full bucket); "+
			"latency = wait + TTFT + per-token × (output - 1), as the mock replies",
		"input quota used: input tokens admitted / (the bucket's depth + ITPM/60 × the time to the last answer), the most the provider could have admitted",
		fmt.Sprintf("heavy tails: a class's requests whose input exceeds %dx the class's median input, and the rest; a heavy p95 far above its unloaded value means the big requests are starved, a rest p95 far above its unloaded value that the small ones are blocked behind them", ReplayHeavyFactor),
		"batch drain: from the batch's first send to its last answer (served or not); requests sent upstream counts every answer the mock gave, 429s included")
	for _, run := range runs {
		if run.key != "sluice" {
			continue
		}
		if f := firstFailure(run.outs); f != "" {
			r.Notes = append(r.Notes, "first sluice failure: "+f)
		}
	}
	return r
}

// checks states issue 22's targets.
func (p *replayPlan) checks(r *Result, figs map[string]replayFigures) {
	sl := figs["sluice"]
	r.check("every interactive request served", "0 failed", fmt.Sprint(sl.interactFail), sl.interactFail == 0)
	for _, c := range []struct {
		class  llm.Priority
		target float64
	}{{llm.Critical, ReplayCriticalTarget}, {llm.High, ReplayHighTarget}} {
		if !p.interactive[c.class] {
			continue
		}
		base := figs["unloaded"].rs.perClass[c.class].latency.P95
		got := sl.rs.perClass[c.class].latency.P95
		ratio := float64(got) / float64(max(base, 1))
		r.check(fmt.Sprintf("%s p95 within %.1fx unloaded", c.class, c.target), fmt.Sprintf("<= %s", ms(time.Duration(float64(base)*c.target))),
			fmt.Sprintf("%s (%.2fx)", ms(got), ratio), base > 0 && ratio <= c.target)
	}
	allowed := int64(float64(sl.upstream) * Replay429Target)
	r.check("provider 429s <= 0.1% of requests sent upstream", fmt.Sprintf("<= %d", allowed), fmt.Sprint(sl.r429), sl.r429 <= allowed)
	if p.batchGroup < 0 {
		return
	}
	room := figs["oracle_room"].drain
	ratio := sl.drain.Seconds() / max(room.Seconds(), 1e-9)
	measured := fmt.Sprintf("%s (%.2fx)", secs(sl.drain), ratio)
	if sl.batchServed < p.ro.Batch {
		measured = fmt.Sprintf("%s, only %d of %d served", secs(sl.drain), sl.batchServed, p.ro.Batch)
	}
	r.check(fmt.Sprintf("batch drains within %.1fx the burst-room oracle's", ReplayDrainTarget),
		fmt.Sprintf("<= %s", secs(time.Duration(float64(room)*ReplayDrainTarget))), measured,
		sl.batchServed == p.ro.Batch && room > 0 && ratio <= ReplayDrainTarget)
}

// setup describes the run.
func (p *replayPlan) setup() []string {
	ro := p.ro
	lines := []string{
		fmt.Sprintf("provider (mock): RPM %s, ITPM %s, OTPM %s on one key, bucket depth %gs, output accounting %s, replies take %v + %v per output token after the first",
			commas(p.limits.RPM), commas(p.limits.ITPM), commas(p.limits.OTPM), p.depthSeconds, p.otpmMode, p.ttft, p.perToken),
	}
	for _, s := range p.services {
		if s.batch {
			lines = append(lines, fmt.Sprintf("batch: %d requests in class %s, all sent at the start; input lognormal (sigma %.1f) with mean %s tokens, capped at %dx; output lognormal mean %d (sigma %.1f), capped at %d; %s input tokens in all",
				s.requests, s.class, replayBatchInputSigma, commas(int64(ro.BatchInputMean)), replayBatchInputCap, ReplayBatchOutputMean,
				replayBatchOutputSigma, replayBatchOutputMax, commas(s.input)))
			continue
		}
		share := ""
		if ro.Limits.ITPM > 0 {
			share = fmt.Sprintf(", %s of the input quota over the window, busiest 10 s at %s of its rate",
				pct(float64(s.input)/(float64(ro.Limits.ITPM)*ro.Window.Minutes())), pct(float64(s.peak)*6/float64(ro.Limits.ITPM)))
		}
		lines = append(lines, fmt.Sprintf("trace %s as %s: %d requests from %v to %v of the trace, %s input tokens%s",
			s.name, s.class, s.requests, ro.From, ro.From+ro.Window, commas(s.input), share))
	}
	scales := []string{}
	for _, t := range ro.Traces {
		if f := ro.TokenScale * t.TokenScale; f != 1 {
			scales = append(scales, fmt.Sprintf("%s x%g", t.Source, f))
		}
	}
	if len(scales) > 0 {
		lines = append(lines, "token scale (input and output): "+strings.Join(scales, ", "))
	}
	lines = append(lines,
		fmt.Sprintf("every request: a non-streaming Anthropic Messages call, max_tokens max(%d, %d x output) unless the trace records it; the mock answers with exactly the recorded output (X-Mock-Output-Tokens)",
			ReplayMaxTokensMin, ReplayMaxTokensFactor),
		fmt.Sprintf("runs, one after the other, each on a fresh mock: unloaded (the traces alone, unlimited key, through the gateway); naive (one client per service, 5 attempts with full jitter, the batch all at once); sluice (profile %s, output_reservation %s, limits set to the mock's, X-Priority sent)",
			ro.Profile, p.outputReservation),
		fmt.Sprintf("clients time out at %v (interactive) and %v (batch)", p.timeout, p.batchTimeout))
	if ro.Speed != 1 {
		lines = append(lines, fmt.Sprintf("speed x%g: arrivals, reply times, the bucket depth and the timeouts are divided by %g and the limits multiplied by it, so the load relative to the quota is unchanged; times below are the sped-up run's (multiply by %g for the trace's)",
			ro.Speed, ro.Speed, ro.Speed))
	}
	if p.quick {
		lines = append(lines, fmt.Sprintf("quick: a smoke run (%v of the traces, a %gs bucket, a %d-request batch unless set); figures are not comparable with the targets",
			replayQuickWindow, replayQuickBurstSeconds, replayQuickBatch))
	}
	return lines
}

func msFloat(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// commas formats n with thousands separators: 2000000 → "2,000,000".
func commas(n int64) string {
	if n < 0 {
		return "-" + commas(-n)
	}
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

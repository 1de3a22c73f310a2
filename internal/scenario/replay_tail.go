package scenario

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// ReplayHeavyFactor is how many times its class's median input a
// request's input must exceed to count in the heavy tail of the replay
// report.
const ReplayHeavyFactor = 4

// tailSplit is one class's heavy tail and the rest, in one run.
type tailSplit struct {
	heavy, rest []time.Duration // latencies of the served requests
	heavyN      int             // heavy requests, served or not
}

// heavyThresholds is, per class, the input above which a request is in
// the heavy tail: ReplayHeavyFactor times the median input of the class's
// requests in outs (0 for a class with none).
func heavyThresholds(outs []Outcome) [llm.NumPriorities]int {
	var in [llm.NumPriorities][]int
	for _, o := range outs {
		in[o.Item.Priority] = append(in[o.Item.Priority], o.Item.InputTokens)
	}
	var th [llm.NumPriorities]int
	for c := range in {
		if len(in[c]) == 0 {
			continue
		}
		slices.Sort(in[c])
		th[c] = ReplayHeavyFactor * in[c][(len(in[c])-1)/2]
	}
	return th
}

// splitTail splits a run's outcomes per class at the thresholds.
func splitTail(outs []Outcome, th [llm.NumPriorities]int) [llm.NumPriorities]tailSplit {
	var s [llm.NumPriorities]tailSplit
	for _, o := range outs {
		c := o.Item.Priority
		heavy := o.Item.InputTokens > th[c]
		if heavy {
			s[c].heavyN++
		}
		switch {
		case !o.OK():
		case heavy:
			s[c].heavy = append(s[c].heavy, o.Latency())
		default:
			s[c].rest = append(s[c].rest, o.Latency())
		}
	}
	return s
}

// heavyTail is the report's table of the heavy tails: per run and class,
// the p95 of the requests whose input exceeds ReplayHeavyFactor times the
// class's median and of the rest, each beside the unloaded run's, so a
// run shows that neither is starved nor blocked behind the other.
func (p *replayPlan) heavyTail(r *Result, runs []replayRun) Table {
	t := Table{Title: fmt.Sprintf("Heavy tails: requests above %dx their class's median input, and the rest (p95 of the served, beside the unloaded run's)", ReplayHeavyFactor),
		Header: []string{"run", "class", "heavy above", "heavy", "heavy p95", "/ unloaded", "rest p95", "/ unloaded"}}
	// Every run replays the same requests (the unloaded one without the
	// batch): a class's threshold is the same in all.
	var th [llm.NumPriorities]int
	for _, run := range runs {
		for c, v := range heavyThresholds(run.outs) {
			if th[c] == 0 {
				th[c] = v
			}
		}
	}
	var base [llm.NumPriorities]tailSplit
	for _, run := range runs {
		if run.key == "unloaded" {
			base = splitTail(run.outs, th)
		}
	}
	ratio := func(name string, got, unloaded []time.Duration) string {
		if len(got) == 0 || len(unloaded) == 0 {
			return "-"
		}
		b := Summarize(unloaded).P95
		if b <= 0 {
			return "-"
		}
		v := float64(Summarize(got).P95) / float64(b)
		r.figure(name, v)
		return fmt.Sprintf("%.2fx", v)
	}
	p95 := func(name string, d []time.Duration) string {
		if len(d) == 0 {
			return "-"
		}
		v := Summarize(d).P95
		r.figure(name, msFloat(v))
		return ms(v)
	}
	for _, run := range runs {
		s := splitTail(run.outs, th)
		for c := range llm.NumPriorities {
			if th[c] == 0 || s[c].heavyN == 0 && len(s[c].rest) == 0 {
				continue
			}
			name := run.key + "_" + llm.Priority(c).String()
			row := []string{run.label, llm.Priority(c).String(), commas(int64(th[c])),
				fmt.Sprintf("%d (%d served)", s[c].heavyN, len(s[c].heavy)), p95(name+"_heavy_p95_ms", s[c].heavy), "-",
				p95(name+"_rest_p95_ms", s[c].rest), "-"}
			if run.key != "unloaded" {
				row[5] = ratio(name+"_heavy_p95_ratio", s[c].heavy, base[c].heavy)
				row[7] = ratio(name+"_rest_p95_ratio", s[c].rest, base[c].rest)
			}
			t.Rows = append(t.Rows, row)
		}
	}
	return t
}

package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// Check is one target of a scenario and whether the run met it.
type Check struct {
	// Name says what is checked; Target the goal, Measured what the run
	// gave.
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// Table is a block of aligned columns in the text report.
type Table struct {
	Title  string     `json:"title,omitempty"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Result is what a scenario (or the demo) measured.
type Result struct {
	// Name is the scenario's name (goodput, priority, …, demo).
	Name string `json:"name"`
	// Verdict is what the run shows, in a few sentences read before any
	// table (the demo's: who served what, at what latency, and who paid
	// for it).
	Verdict []string `json:"verdict,omitempty"`
	// Setup describes the run: limits, workload, configuration.
	Setup []string `json:"setup"`
	// Tables hold the side-by-side figures.
	Tables []Table `json:"tables"`
	// Figures are the key numbers, machine-readable.
	Figures map[string]float64 `json:"figures"`
	// Checks are the targets and whether each was met.
	Checks []Check `json:"checks,omitempty"`
	// Notes explain the figures (formulas, causes of a miss).
	Notes []string `json:"notes,omitempty"`
	// Elapsed is the scenario's wall time.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Met reports whether every check was met.
func (r *Result) Met() bool {
	for _, c := range r.Checks {
		if !c.Met {
			return false
		}
	}
	return true
}

func (r *Result) figure(name string, v float64) {
	if r.Figures == nil {
		r.Figures = map[string]float64{}
	}
	r.Figures[name] = v
}

func (r *Result) check(name, target, measured string, met bool) {
	r.Checks = append(r.Checks, Check{Name: name, Target: target, Measured: measured, Met: met})
}

// WriteText prints the result as aligned plain text.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s (%s)\n", r.Name, r.Elapsed.Round(100*time.Millisecond))
	if len(r.Verdict) > 0 {
		for _, v := range r.Verdict {
			fmt.Fprintf(&b, "%s\n", v)
		}
		b.WriteString("\n")
	}
	for _, s := range r.Setup {
		fmt.Fprintf(&b, "   %s\n", s)
	}
	for _, t := range r.Tables {
		b.WriteString("\n")
		if t.Title != "" {
			fmt.Fprintf(&b, "%s\n", t.Title)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\t\n", strings.Join(t.Header, "\t"))
		for _, row := range t.Rows {
			fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
		}
		_ = tw.Flush() // writes to a strings.Builder
	}
	if len(r.Checks) > 0 {
		b.WriteString("\nTargets\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, c := range r.Checks {
			verdict := "MET"
			if !c.Met {
				verdict = "MISSED"
			}
			fmt.Fprintf(tw, "  %s\t%s\ttarget %s\tmeasured %s\n", verdict, c.Name, c.Target, c.Measured)
		}
		_ = tw.Flush()
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	return nil
}

// WriteJSON prints results as one indented JSON array.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(results); err != nil {
		return fmt.Errorf("writing JSON report: %w", err)
	}
	return nil
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fms", v)
	case v >= 1:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.3fms", v)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// runStats are the client-side figures of one run.
type runStats struct {
	all, ok  int
	elapsed  time.Duration // first arrival to last answer
	attempts int           // known attempts summed
	latency  Summary       // of every successful request
	perClass [llm.NumPriorities]classStats
}

type classStats struct {
	count, ok  int
	latency    Summary // of successful requests
	throughput float64 // successes per second over the run
}

func summarizeRun(outs []Outcome) runStats {
	var rs runStats
	if len(outs) == 0 {
		return rs
	}
	first, last := outs[0].Start, outs[0].End
	var lat [llm.NumPriorities][]time.Duration
	var all []time.Duration
	for _, o := range outs {
		first, last = min(first, o.Start), max(last, o.End)
		c := o.Item.Priority
		rs.all++
		rs.perClass[c].count++
		rs.attempts += o.Attempts
		if o.OK() {
			rs.ok++
			rs.perClass[c].ok++
			lat[c] = append(lat[c], o.Latency())
			all = append(all, o.Latency())
		}
	}
	rs.elapsed = last - first
	rs.latency = Summarize(all)
	for c := range rs.perClass {
		rs.perClass[c].latency = Summarize(lat[c])
		if rs.elapsed > 0 {
			rs.perClass[c].throughput = float64(rs.perClass[c].ok) / rs.elapsed.Seconds()
		}
	}
	return rs
}

// throughput is successes per second over the run.
func (rs runStats) throughput() float64 {
	if rs.elapsed <= 0 {
		return 0
	}
	return float64(rs.ok) / rs.elapsed.Seconds()
}

// classTable is the per-class latency table of one or two runs.
func classTable(title string, runs map[string]runStats, order []string) Table {
	t := Table{Title: title, Header: []string{"client", "class", "requests", "ok", "avg", "p50", "p95", "p99", "req/s"}}
	for _, name := range order {
		rs := runs[name]
		for c := range llm.NumPriorities {
			cs := rs.perClass[c]
			if cs.count == 0 {
				continue
			}
			l := cs.latency
			t.Rows = append(t.Rows, []string{name, llm.Priority(c).String(), fmt.Sprint(cs.count), fmt.Sprint(cs.ok),
				ms(l.Avg), ms(l.P50), ms(l.P95), ms(l.P99), fmt.Sprintf("%.2f", cs.throughput)})
		}
		l := rs.latency
		t.Rows = append(t.Rows, []string{name, "all", fmt.Sprint(rs.all), fmt.Sprint(rs.ok),
			ms(l.Avg), ms(l.P50), ms(l.P95), ms(l.P99), fmt.Sprintf("%.2f", rs.throughput())})
	}
	return t
}

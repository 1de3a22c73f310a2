package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// demoProgressEvery is how often the demo says how far each side got.
const demoProgressEvery = 5 * time.Second

// answerCount counts one side's answered requests for the progress lines.
type answerCount struct {
	name string
	n    atomic.Int64
}

// counted returns send, counting each answer (success or not) in c.
func (c *answerCount) counted(send sender) sender {
	return func(ctx context.Context, it Item) (int, int, error) {
		status, attempts, err := send(ctx, it)
		c.n.Add(1)
		return status, attempts, err
	}
}

// reportProgress writes a line every `every` of o's clock saying how many of
// total requests each side has answered, until stop is called.
func reportProgress(ctx context.Context, o Options, total int, every time.Duration, sides ...*answerCount) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	t0 := o.Clock.Now()
	wg.Go(func() {
		t := o.Clock.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C():
			}
			parts := make([]string, len(sides))
			for i, s := range sides {
				parts[i] = fmt.Sprintf("%s %d/%d answered", s.name, s.n.Load(), total)
			}
			o.progress("demo: %s: %s", o.Clock.Now().Sub(t0).Round(time.Second), strings.Join(parts, ", "))
			t.Reset(every)
		}
	})
	return func() { close(done); wg.Wait() }
}

// demoVerdict says what the demo showed, from its figures: what each side
// served and how often the provider refused, the urgent classes' p95 on
// each side, the wall times, and what the lower classes paid for it.
func demoVerdict(sl, nv runStats, sl429, nv429, nvRetries int64) []string {
	p95 := func(rs runStats, c llm.Priority) string {
		if rs.perClass[c].ok == 0 {
			return "none served"
		}
		return ms(rs.perClass[c].latency.P95)
	}
	v := []string{
		fmt.Sprintf("Sluice served %d of %d requests and the provider refused %d of its calls (429); the naive client served %d of %d, with %d provider 429s and %d retries.",
			sl.ok, sl.all, sl429, nv.ok, nv.all, nv429, nvRetries),
		fmt.Sprintf("Critical p95: %s through Sluice, %s naive. High p95: %s and %s. Wall time: %s and %s.",
			p95(sl, llm.Critical), p95(nv, llm.Critical), p95(sl, llm.High), p95(nv, llm.High), secs(sl.elapsed), secs(nv.elapsed)),
	}
	lower := fmt.Sprintf("normal p95 %s and low p95 %s through Sluice, against %s and %s naive",
		p95(sl, llm.Normal), p95(sl, llm.Low), p95(nv, llm.Normal), p95(nv, llm.Low))
	slower := func(c llm.Priority) bool { return sl.perClass[c].latency.P95 > nv.perClass[c].latency.P95 }
	paid := slower(llm.Low) || slower(llm.Normal)
	switch {
	case slower(llm.Critical) || slower(llm.High):
		v = append(v, "Critical or high was slower through Sluice than with the naive client in this run ("+lower+
			"); the tables below give each class, the breaker's opens and the provider's 529s.")
	case paid:
		v = append(v, "The lower classes paid for it: "+lower+
			". Sluice holds them back while more urgent work waits and never sends what the provider would refuse, which is also why its all-classes row below can be slower than the naive client's.")
	default:
		v = append(v, "The lower classes did not pay for it: "+lower+".")
	}
	return v
}

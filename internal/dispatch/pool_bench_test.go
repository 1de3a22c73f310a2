package dispatch_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// BenchmarkKeySelection is the cost of placing one request on the key
// with the most room (and giving the reservation back) at 1 and 8 keys,
// each with all four buckets limited and half of the 8 in one org. Target:
// ≤ 5 µs per request at 8 keys. Besides ns/op (wall time, inflated on a
// shared machine by other processes' turns on the CPU) it reports
// cpu-ns/op, the process's CPU time per selection (getrusage), which is
// what the selection itself costs.
func BenchmarkKeySelection(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(map[int]string{1: "keys=1", 8: "keys=8"}[n], func(b *testing.B) {
			ks := keys(n)
			orgs := map[string]upcfg.Org{}
			if n > 1 {
				for i := range n / 2 {
					ks[i].Org = "acme"
				}
				orgs["acme"] = upcfg.Org{Limits: upcfg.Limits{RequestsPerMinute: 1e9}}
			}
			d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "bench", Protocol: llm.Anthropic, APIKeys: ks, Orgs: orgs,
				Limits: upcfg.Limits{RequestsPerMinute: 1e9, InputTokensPerMinute: 1e12, OutputTokensPerMinute: 1e12, TokensPerMinute: 1e12}},
				Clock: clock.NewFake(t0)})
			if err != nil {
				b.Fatal(err)
			}
			cost := flow.NewAmount(500, 200)
			cpu0 := processCPU(b)
			for b.Loop() {
				if !dispatch.PickAndGiveBack(d, cost) {
					b.Fatal("no key")
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPooledDrain drains a batch through 1, 2 and 4 keys on the mock
// (60 RPM per key, both sides) on a fake clock and reports the drain time
// against the ideal for the pooled quota (n requests at k×60 RPM, less
// the mock's initial burst) and the share of provider 429s. Target: 2 and
// 4 keys within 3 % of the ideal, ≤ 0.5 % 429s.
func BenchmarkPooledDrain(b *testing.B) {
	const n, rpm, burstSeconds = 600, 60, 5
	for _, k := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("keys=%d", k), func(b *testing.B) {
			var ratio, rate429 float64
			for b.Loop() {
				p := newPoolRig(b, mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: burstSeconds}, upcfg.Config{APIKeys: keys(k), Limits: upcfg.Limits{RequestsPerMinute: rpm}})
				took, res := p.drain(b, n, nil)
				for _, r := range res {
					if r.err != nil {
						b.Fatal(r.err)
					}
				}
				burst := float64(k) * rpm / 60 * burstSeconds
				ideal := (float64(n) - burst) / (float64(k) * rpm / 60)
				ratio = took.Seconds() / ideal
				rate429 = float64(status429(p.mock.Stats())) / n
				_ = p.d.Stop(context.Background())
			}
			b.ReportMetric(ratio, "drain/ideal")
			b.ReportMetric(rate429*100, "%429")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

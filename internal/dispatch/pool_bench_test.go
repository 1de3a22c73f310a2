package dispatch_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/internal/upstream"
)

// BenchmarkKeySelection is the cost of placing one request on the key
// with the most room (and giving the reservation back) at 1 and 8 keys,
// each with all four buckets limited and half of the 8 in one org. Target:
// ≤ 5 µs per request at 8 keys.
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
			for b.Loop() {
				if !dispatch.PickAndGiveBack(d, cost) {
					b.Fatal("no key")
				}
			}
		})
	}
}

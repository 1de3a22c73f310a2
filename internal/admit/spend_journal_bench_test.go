package admit_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

// BenchmarkBudgetedAdmission measures what a budget's durable
// reservation adds to a call's admission: the client "free" has no budget
// (nothing written before the call), "team" has one (its hold written
// before AdmitNow returns). admit times AdmitNow alone, one call at a
// time, its settlement written off the clock (the latency a request
// sees); call is AdmitNow then Settle back to back, so each admission
// also waits for the previous settlement's write (the worst case of one
// caller); parallel16 is call by 16 callers at once (the group commit:
// they share writes). BENCHMARKS.md has the figures.
//
//	go test ./internal/admit -run '^$' -bench BudgetedAdmission -benchtime 2s
func BenchmarkBudgetedAdmission(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var dsn string
			if backend == "sqlite" {
				dsn = "sqlite:" + filepath.Join(b.TempDir(), "spend.db")
			} else {
				dsn = jobstoretest.PostgresDSN(b)
			}
			obs := &spendObserver{}
			// undurable reports the share of the admissions of b sent without
			// their hold (the store did not answer within the hold timeout).
			undurable := func(b *testing.B, before int) {
				_, after := obs.counts()
				b.ReportMetric(float64(after-before)/float64(b.N), "undurable/op")
			}
			st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
			require.NoError(b, err)
			b.Cleanup(func() { require.NoError(b, st.Close()) })
			l, err := admit.New(admit.Config{Clients: []admit.Client{{Name: "team", Budget: admit.Budget{Total: 1e6}}, {Name: "free"}},
				Prices: budgetPrices, Upstreams: []upstream.Config{{Name: "main", Protocol: llm.Anthropic}}, Clock: clock.Real(), Observer: obs})
			require.NoError(b, err)
			l.Bind(map[string]admit.Engine{"main": &streamEngine{}})
			require.NoError(b, l.Start(context.Background(), st))
			b.Cleanup(func() { require.NoError(b, l.Stop(context.Background())) })
			route, ok := l.RouteJobs("main", llm.High, "", call().Cost)
			require.True(b, ok)
			target := route.Target
			one := func(client string) {
				req := call()
				req.Client = client
				adm, err := l.AdmitNow(target, req)
				if err != nil {
					b.Fatal(err)
				}
				adm.Settle(done, true)
			}
			for _, client := range []string{"free", "team"} {
				b.Run(client+"/admit", func(b *testing.B) {
					_, before := obs.counts()
					defer undurable(b, before)
					var adms []admit.Settler
					for b.Loop() {
						req := call()
						req.Client = client
						adm, err := l.AdmitNow(target, req)
						if err != nil {
							b.Fatal(err)
						}
						adms = append(adms, adm)
						if len(adms) == 100 {
							b.StopTimer()
							for _, a := range adms {
								a.Settle(done, true)
							}
							adms = adms[:0]
							require.NoError(b, l.Flush(context.Background()))
							b.StartTimer()
						}
					}
					for _, a := range adms {
						a.Settle(done, true)
					}
				})
				b.Run(client+"/call", func(b *testing.B) {
					_, before := obs.counts()
					defer undurable(b, before)
					for b.Loop() {
						one(client)
					}
				})
				b.Run(client+"/parallel16", func(b *testing.B) {
					_, before := obs.counts()
					defer undurable(b, before)
					b.SetParallelism(8) // 16 callers on 2 cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							one(client)
						}
					})
				})
			}
		})
	}
}

package quota_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/quota"
)

// BenchmarkReserveSettle is the ledger's cost per request: one Reserve
// and one Settle, on one client (the contended case) in parallel.
func BenchmarkReserveSettle(b *testing.B) {
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(1e6), Month: usd(1e7)}, t0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h, err := l.Reserve("a", usd(0.01), t0)
			if err != nil {
				b.Fatal(err)
			}
			l.Settle(h, usd(0.005), t0)
		}
	})
}

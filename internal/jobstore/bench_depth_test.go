package jobstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// BenchmarkClaimDepth measures one claim + complete with a deep backlog
// waiting, and the process memory while it waits: both must stay flat from
// 10k to 1M queued jobs, because the queue lives on disk and a claim walks
// the partial claim index from its head. The 1M case runs when
// SLUICE_BENCH_1M is set (filling takes 10–60 s per backend).
//
// Metrics: claim-p50-ms and claim-p99-ms per claim+complete, heap-MB (live
// heap after a GC, with the backlog waiting) and rss-MB (the process's
// resident set then).
func BenchmarkClaimDepth(b *testing.B) {
	depths := []int{10_000}
	if os.Getenv("SLUICE_BENCH_1M") != "" {
		depths = append(depths, 1_000_000)
	}
	for _, be := range benchBackends {
		for _, depth := range depths {
			b.Run(fmt.Sprintf("%s/%d", be.name, depth), func(b *testing.B) {
				dsn := be.dsn(b)
				// Open once to migrate, then fill behind the store's back.
				s, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
				require.NoError(b, err)
				require.NoError(b, s.Close())
				fillFast(b, dsn, depth)
				s = benchStore(b, func(testing.TB) string { return dsn })
				ctx := context.Background()
				heap, rss := memNow()
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					jobs, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: 1, LeaseFor: time.Minute, Now: time.Now()})
					require.NoError(b, err)
					require.Len(b, jobs, 1)
					require.NoError(b, s.Complete(ctx, jobstore.CompleteParams{ID: jobs[0].ID, Token: jobs[0].Lease.Token, Now: time.Now()}))
					lat = append(lat, time.Since(start))
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "claim-p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "claim-p99-ms")
				b.ReportMetric(heap, "heap-MB")
				b.ReportMetric(rss, "rss-MB")
			})
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// memNow returns the live heap after a GC and the resident set, in MB.
func memNow() (heap, rss float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	heap = float64(m.HeapAlloc) / (1 << 20)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				rss = kb / 1024
			}
		}
	}
	return heap, rss
}

// fillFast inserts n queued jobs for upstream "a", spread over the four
// priorities, in one statement: generate_series on PostgreSQL, a
// recursive CTE on SQLite.
func fillFast(b *testing.B, dsn string, n int) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sql.Open("sqlite", path)
		require.NoError(b, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
			INSERT INTO sluice_jobs (upstream, priority, path, body, max_attempts, state, available_at, created_at, updated_at)
			SELECT 'a', n % 4, '/v1/messages', ?, 3, 'queued', ?, ?, ? FROM g`,
			n, benchBody, now.UnixMicro(), now.UnixMicro(), now.UnixMicro())
		require.NoError(b, err)
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(b, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO sluice_jobs (upstream, priority, path, body, max_attempts, state, available_at, created_at, updated_at)
		SELECT 'a', (g % 4)::smallint, '/v1/messages', $1, 3, 'queued', $2, $2, $2 FROM generate_series(1, $3) g`,
		benchBody, now, n)
	require.NoError(b, err)
	_, err = conn.Exec(ctx, `ANALYZE sluice_jobs`)
	require.NoError(b, err)
}

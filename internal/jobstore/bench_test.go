package jobstore_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
)

// Benchmarks measure the store with a no-op worker that completes every
// job at once. Run with SLUICE_TEST_POSTGRES_URL set for the postgres cases;
// BenchmarkClaimDepth/1M also needs SLUICE_BENCH_1M=1 (it takes a while to
// fill).

var benchBackends = []struct {
	name string
	dsn  func(testing.TB) string
}{{"sqlite", sqliteDSN}, {"postgres", jobstoretest.PostgresDSN}}

func benchStore(b *testing.B, dsn func(testing.TB) string) jobstore.Store {
	s, err := jobstore.Open(context.Background(), dsn(b), jobstore.Options{MaxConns: 24})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, s.Close()) })
	return s
}

var benchBody = []byte(`{"model":"claude-haiku","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)

// fill inserts n queued jobs in batches (not timed).
func fill(b *testing.B, s jobstore.Store, n int) {
	now := time.Now()
	for done := 0; done < n; {
		k := min(10000, n-done)
		jobs := make([]jobstore.InsertParams, k)
		for i := range jobs {
			jobs[i] = jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: benchBody, MaxAttempts: 3, CustomID: fmt.Sprint(done + i), Now: now}
		}
		_, err := s.CreateBatch(context.Background(), jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: jobs, Now: now})
		require.NoError(b, err)
		done += k
	}
}

// work runs workers claiming up to batch jobs at a time and completing each
// one concurrently, until want jobs are done or stop is closed.
func work(ctx context.Context, s jobstore.Store, workers, batch int, want int64, done *atomic.Int64, wake func(context.Context) <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var notify <-chan struct{}
			if wake != nil {
				notify = wake(ctx)
			}
			for done.Load() < want && ctx.Err() == nil {
				jobs, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: batch, Owner: fmt.Sprint("w", w), LeaseFor: time.Minute, Now: time.Now()})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					if notify != nil {
						select {
						case <-notify:
						case <-time.After(2 * time.Millisecond):
						case <-ctx.Done():
						}
					}
					continue
				}
				var cw sync.WaitGroup
				for _, j := range jobs {
					cw.Go(func() {
						if err := s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: jobstore.Result{Status: 200, Body: []byte(`{}`)}, Now: time.Now()}); err != nil {
							errs <- err
						}
					})
				}
				cw.Wait()
				done.Add(int64(len(jobs)))
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// BenchmarkDrain measures draining a backlog of b.N queued jobs.
func BenchmarkDrain(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn)
			fill(b, s, b.N)
			var done atomic.Int64
			b.ResetTimer()
			start := time.Now()
			require.NoError(b, work(context.Background(), s, 4, 256, int64(b.N), &done, nil))
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkSubmitAndWork measures concurrent one-at-a-time submits with
// workers completing them as they arrive.
func BenchmarkSubmitAndWork(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var done atomic.Int64
			workErr := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() {
				workErr <- work(ctx, s, 4, 256, int64(b.N), &done, func(ctx context.Context) <-chan struct{} { return s.Notify(ctx, "a") })
			}()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, err := s.Insert(ctx, jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: benchBody, MaxAttempts: 3, Now: time.Now()})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			require.NoError(b, <-workErr)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkPickupLatency measures the time from Insert returning to an idle
// worker (waiting on Notify) claiming the job.
func BenchmarkPickupLatency(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn)
			ctx := b.Context()
			notify := s.Notify(ctx, "a")
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				_, err := s.Insert(ctx, jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: benchBody, MaxAttempts: 3, Now: time.Now()})
				require.NoError(b, err)
				inserted := time.Now()
				for {
					<-notify
					jobs, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: 1, LeaseFor: time.Minute, Now: time.Now()})
					require.NoError(b, err)
					if len(jobs) == 1 {
						lat = append(lat, time.Since(inserted))
						require.NoError(b, s.Complete(ctx, jobstore.CompleteParams{ID: jobs[0].ID, Token: jobs[0].Lease.Token, Now: time.Now()}))
						break
					}
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

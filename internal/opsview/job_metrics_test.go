package opsview

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// fakeCounts is a store's counting side, scripted by the test.
type fakeCounts struct {
	mu        sync.Mutex
	live      []jobstore.LiveCount
	paused    []string
	liveErr   error
	pausedErr error
	hang      bool // block until the read's context ends
	reads     int
}

func (f *fakeCounts) CountLive(ctx context.Context, _ time.Time) ([]jobstore.LiveCount, error) {
	f.mu.Lock()
	f.reads++
	live, err, hang := f.live, f.liveErr, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return live, err
}

func (f *fakeCounts) PausedUpstreams(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	paused, err, hang := f.paused, f.pausedErr, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return paused, err
}

func (f *fakeCounts) set(fn func(f *fakeCounts)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeCounts) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// TestJobCountsCollector: the queue-depth gauges read the store at most
// once per JobCountMaxAge, report configured upstreams with zeros, keep the
// last values (and count the error) when a read fails, and never hold a
// scrape longer than the timeout.
func TestJobCountsCollector(t *testing.T) {
	t.Parallel()
	errDown := errors.New("store down")
	cases := []struct {
		name string
		run  func(t *testing.T, c *jobCounts, f *fakeCounts, clk *clock.Fake, scrape func() string)
	}{
		{"configured upstreams with zeros, and others found", func(t *testing.T, _ *jobCounts, f *fakeCounts, _ *clock.Fake, scrape func() string) {
			f.set(func(f *fakeCounts) {
				f.live = []jobstore.LiveCount{{Upstream: "a", Queued: 3, Delayed: 1, Running: 2}, {Upstream: "old", Queued: 1}}
				f.paused = []string{"a"}
			})
			requireSeries(t, scrape(),
				`sluice_jobs{state="queued",upstream="a"} 3`, `sluice_jobs{state="running",upstream="a"} 2`,
				`sluice_jobs_delayed{upstream="a"} 1`, `sluice_job_upstream_paused{upstream="a"} 1`,
				`sluice_jobs{state="queued",upstream="b"} 0`, `sluice_jobs{state="running",upstream="b"} 0`,
				`sluice_jobs_delayed{upstream="b"} 0`, `sluice_job_upstream_paused{upstream="b"} 0`,
				`sluice_jobs{state="queued",upstream="old"} 1`)
		}},
		{"one read per max age", func(t *testing.T, _ *jobCounts, f *fakeCounts, clk *clock.Fake, scrape func() string) {
			f.set(func(f *fakeCounts) { f.live = []jobstore.LiveCount{{Upstream: "a", Queued: 1}} })
			for range 3 {
				requireSeries(t, scrape(), `sluice_jobs{state="queued",upstream="a"} 1`)
			}
			require.Equal(t, 1, f.readCount())
			f.set(func(f *fakeCounts) { f.live = []jobstore.LiveCount{{Upstream: "a", Queued: 7}} })
			clk.Advance(JobCountMaxAge - time.Millisecond)
			requireSeries(t, scrape(), `sluice_jobs{state="queued",upstream="a"} 1`)
			clk.Advance(time.Millisecond)
			requireSeries(t, scrape(), `sluice_jobs{state="queued",upstream="a"} 7`)
			require.Equal(t, 2, f.readCount())
		}},
		{"a failed read keeps the last values", func(t *testing.T, _ *jobCounts, f *fakeCounts, clk *clock.Fake, scrape func() string) {
			f.set(func(f *fakeCounts) {
				f.live, f.paused = []jobstore.LiveCount{{Upstream: "a", Running: 4}}, []string{"b"}
			})
			requireSeries(t, scrape(), `sluice_jobs{state="running",upstream="a"} 4`, `sluice_jobs_count_errors_total 0`)
			f.set(func(f *fakeCounts) { f.live, f.liveErr, f.pausedErr = nil, errDown, errDown })
			clk.Advance(JobCountMaxAge)
			requireSeries(t, scrape(), `sluice_jobs{state="running",upstream="a"} 4`, `sluice_job_upstream_paused{upstream="b"} 1`,
				`sluice_jobs_count_errors_total 2`)
			clk.Advance(time.Second)
			requireSeries(t, scrape(), `sluice_jobs_count_errors_total 2`) // no retry before the max age
			f.set(func(f *fakeCounts) { f.liveErr, f.pausedErr = nil, nil })
			clk.Advance(JobCountMaxAge)
			requireSeries(t, scrape(), `sluice_jobs{state="running",upstream="a"} 0`, `sluice_jobs_count_errors_total 2`)
		}},
		{"a hanging store is cut off", func(t *testing.T, c *jobCounts, f *fakeCounts, _ *clock.Fake, scrape func() string) {
			c.timeout = 20 * time.Millisecond
			f.set(func(f *fakeCounts) { f.hang = true })
			start := time.Now()
			body := scrape()
			require.Less(t, time.Since(start), 5*time.Second, "the scrape waited for the store")
			requireSeries(t, body, `sluice_jobs_count_errors_total 2`)
			require.NotContains(t, body, "sluice_jobs{", "nothing was read yet: no values to report")
		}},
		{"no store, no gauges", func(t *testing.T, c *jobCounts, f *fakeCounts, _ *clock.Fake, scrape func() string) {
			f.set(func(f *fakeCounts) { f.live = []jobstore.LiveCount{{Upstream: "a", Queued: 1}} })
			c.setStore(nil)
			body := scrape()
			require.NotContains(t, body, "sluice_jobs{")
			require.NotContains(t, body, "sluice_job_upstream_paused{")
			require.Zero(t, f.readCount())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			c := newJobCounts(clk, discardLogger(), []string{"a", "b"})
			f := &fakeCounts{}
			c.setStore(f)
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
			tc.run(t, c, f, clk, func() string {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				require.Equal(t, http.StatusOK, rec.Code, "a scrape never fails")
				b, err := io.ReadAll(rec.Body)
				require.NoError(t, err)
				return string(b)
			})
		})
	}
}

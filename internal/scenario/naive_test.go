package scenario

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
)

// scripted answers each request with the next of its statuses and headers
// (the last one repeats) and counts requests.
type scripted struct {
	mu      sync.Mutex
	answers []answer
	n       int
	arrived chan int // receives the request number as each arrives
}

type answer struct {
	status int
	header map[string]string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	a := s.answers[min(s.n, len(s.answers)-1)]
	s.n++
	n := s.n
	s.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(`{}`))
	if s.arrived != nil {
		s.arrived <- n
	}
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func TestNaiveHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string]string
		wait   time.Duration
	}{
		{"retry-after seconds", map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{"retry-after-ms wins", map[string]string{"Retry-After": "9", "Retry-After-Ms": "1500"}, 1500 * time.Millisecond},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := &scripted{answers: []answer{{429, tc.header}, {200, nil}}, arrived: make(chan int, 4)}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			clk := clock.NewFake(time.Unix(1e9, 0))
			// BaseDelay is the jitter added to a hint: 1ns keeps the test exact.
			n, err := NewNaive(NaiveConfig{HTTPClient: ts.Client(), Clock: clk, BaseDelay: time.Nanosecond})
			require.NoError(t, err)
			type result struct {
				r   Reply
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := n.Do(context.Background(), ts.URL, http.Header{}, []byte(`{}`))
				done <- result{r, err}
			}()
			require.Equal(t, 1, <-srv.arrived)
			require.True(t, clk.WaitForTimers(1, 5*time.Second), "the client sleeps before retrying")
			clk.Advance(tc.wait - time.Millisecond)
			require.Equal(t, 1, clk.Timers(), "still waiting just before the hint")
			require.Equal(t, 1, srv.count())
			clk.Advance(time.Millisecond + time.Nanosecond)
			res := <-done
			require.NoError(t, res.err)
			require.Equal(t, http.StatusOK, res.r.Status)
			require.Equal(t, 2, res.r.Attempts)
			require.Equal(t, NaiveStats{Requests: 1, Attempts: 2, Retries: 1}, n.Stats())
		})
	}
}

func TestNaiveGivesUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		answers      []answer
		maxAttempts  int
		wantStatus   int
		wantAttempts int
	}{
		{"overload until attempts run out", []answer{{529, nil}}, 3, 529, 3},
		{"a client error is not retried", []answer{{400, nil}}, 5, 400, 1},
		{"success after two 503s", []answer{{503, nil}, {503, nil}, {200, nil}}, 5, 200, 3},
		{"one attempt means no retry", []answer{{429, map[string]string{"Retry-After": "1"}}}, 1, 429, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := &scripted{answers: tc.answers}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			clk := clock.NewFake(time.Unix(1e9, 0))
			n, err := NewNaive(NaiveConfig{HTTPClient: ts.Client(), Clock: clk, MaxAttempts: tc.maxAttempts,
				BaseDelay: time.Second, MaxDelay: 4 * time.Second})
			require.NoError(t, err)
			done := make(chan Reply, 1)
			go func() {
				r, _ := n.Do(context.Background(), ts.URL, http.Header{}, nil)
				done <- r
			}()
			for {
				select {
				case r := <-done:
					require.Equal(t, tc.wantStatus, r.Status)
					require.Equal(t, tc.wantAttempts, r.Attempts)
					require.Equal(t, tc.wantAttempts, srv.count())
					return
				default:
				}
				// Each backoff is at most MaxDelay: move past it.
				if clk.WaitForTimers(1, 50*time.Millisecond) {
					clk.Advance(4 * time.Second)
				}
			}
		})
	}
}

func TestNaiveConcurrencyLimit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, peak := 0, 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer ts.Close()
	n, err := NewNaive(NaiveConfig{HTTPClient: ts.Client(), Concurrency: 2})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { _, _ = n.Do(context.Background(), ts.URL, http.Header{}, nil) })
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return inFlight == 2 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Equal(t, 2, peak)
}

func TestNaiveConfigRejects(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]NaiveConfig{
		"Concurrency": {Concurrency: -1},
		"MaxAttempts": {MaxAttempts: -2},
		"BaseDelay":   {BaseDelay: time.Second, MaxDelay: time.Millisecond},
	} {
		_, err := NewNaive(cfg)
		require.ErrorContains(t, err, name)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{"ms first", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		{"bad ms falls back to seconds", http.Header{"Retry-After": {"1"}, "Retry-After-Ms": {"soon"}}, time.Second, true},
		{"http date ignored", http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}, 0, false},
		{"negative ignored", http.Header{"Retry-After": {"-4"}}, 0, false},
		{"huge ignored", http.Header{"Retry-After": {"1e300"}}, 0, false},
		{"nil header", nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := retryAfter(tc.header)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzRetryAfter: any header value gives a non-negative bounded wait or
// none, never a panic. Seeds from the spec's retry-after captures.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "7", "60", "0.5", "-1", "NaN", "Inf", "1e9", "", "Wed, 21 Oct 2015 07:28:00 GMT", "20 "} {
		f.Add(s, "")
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, secs, millis string) {
		h := http.Header{}
		h.Set("Retry-After", secs)
		h.Set("Retry-After-Ms", millis)
		d, ok := retryAfter(h)
		if !ok {
			require.Zero(t, d)
			return
		}
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, 1e6*time.Second)
	})
}

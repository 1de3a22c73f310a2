package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The job door of the prompt-cache workloads: a job worker takes an
// admission ticket (Acquire) for a class before it claims a job, so the
// ticket knows nothing of the request it will carry; the request comes
// with the ticket's Call. A call the dispatcher gives back (ErrNotAdmitted:
// the request's key has room only later) is requeued for its RetryAfter,
// as the job runtime requeues the job in the store.

// sleepers are the callers resting on the fake clock, each until its
// wake-up.
type sleepers struct {
	mu    sync.Mutex
	until map[int]time.Time
}

// resting counts the callers whose wake-up is still ahead of now.
func (s *sleepers) resting(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, u := range s.until {
		if now.Before(u) {
			n++
		}
	}
	return n
}

// sleep rests caller id on p's clock for d.
func (s *sleepers) sleep(p *poolRig, id int, d time.Duration) {
	tm := p.fc.NewTimer(d)
	s.mu.Lock()
	s.until[id] = p.fc.Now().Add(d)
	s.mu.Unlock()
	<-tm.C()
	s.mu.Lock()
	delete(s.until, id)
	s.mu.Unlock()
}

// ticketCall sends req through d's ticket door as a job worker does,
// resting for the RetryAfter of each call given back, and returns the
// status of the answer and how many calls were given back.
func ticketCall(p *poolRig, sl *sleepers, id int, d *dispatch.Dispatcher, req *dispatch.Request) (int, int, error) {
	held := 0
	for {
		// The worker's estimate: the class's cost, not the request.
		tk, err := d.Acquire(context.Background(), dispatch.AcquireParams{Priority: llm.Low, Client: "jobs", Cost: req.Cost})
		if err != nil {
			return 0, held, err
		}
		r := *req
		resp, err := tk.Call(context.Background(), &r)
		var de *dispatch.Error
		if errors.As(err, &de) && errors.Is(de, dispatch.ErrNotAdmitted) {
			held++
			sl.sleep(p, id, max(de.RetryAfter, time.Millisecond))
			continue
		}
		if err != nil {
			return 0, held, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, held, nil
	}
}

// runJobSessionsOn is runSessionsOn through the ticket door: each
// session's turns are jobs, the next submitted once the answer to the
// last is in, dealt to ds in turn.
func runJobSessionsOn(t testing.TB, p *poolRig, ds []*dispatch.Dispatcher, sessions, turns int) (cacheRun, int) {
	t.Helper()
	if len(ds) == 0 {
		ds = []*dispatch.Dispatcher{p.d}
	}
	var dealt atomic.Int64
	var done atomic.Int32
	var held atomic.Int64
	var wg sync.WaitGroup
	sl := &sleepers{until: map[int]time.Time{}}
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			for turn := range turns {
				d := ds[int(dealt.Add(1)-1)%len(ds)]
				status, h, err := ticketCall(p, sl, s, d, cacheRequest(t, cacheBody(s, turn, 200, 400, 200)))
				held.Add(int64(h))
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d", status)
				}
				if err != nil {
					errs <- fmt.Errorf("session %d turn %d: %w", s, turn, err)
					return
				}
			}
		}()
	}
	p.driveResting(t, sessions, &done, func() int { return sl.resting(p.fc.Now()) }, ds...)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return newCacheRun(p, sessions*turns), int(held.Load())
}

// jobRoundRobin is roundRobin through the ticket door.
func jobRoundRobin(t testing.TB, sessions, turns int) cacheRun {
	t.Helper()
	p := cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOn)
	r, _ := runJobSessionsOn(t, p, oneKeyDispatchers(t, p), sessions, turns)
	return r
}

// TestPromptCacheAffinityJobs: the conversation workload of
// TestPromptCacheAffinity sent as jobs (a ticket admitted before its
// request is known, the request brought by its Call) reads at least 85 %
// of its cacheable prefix tokens from the cache over a 2-key pool, as live
// requests do, because the call moves to the key its session's cache is
// on; with affinity off (the key the ticket was admitted on, as jobs were
// placed before) and round robin measured beside it. No provider 429.
func TestPromptCacheAffinityJobs(t *testing.T) {
	t.Parallel()
	const sessions, turns = 12, 6
	on, held := runJobSessionsOn(t, cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOn), nil, sessions, turns)
	off, _ := runJobSessionsOn(t, cacheRig(t, upcfg.PromptCacheOn, upcfg.PromptCacheOff), nil, sessions, turns)
	rr := jobRoundRobin(t, sessions, turns)
	t.Logf("jobs, affinity: %.1f%% of the cacheable prefix read from the cache (%d read, %d written), %.2f req/s, %d calls given back, keys %v; ticket's key (affinity off): %.1f%% (%d read, %d written), %.2f req/s; round robin: %.1f%% (%d read, %d written), %.2f req/s",
		100*on.readShare(), on.read, on.written, on.perSecond(), held, on.keyRequest, 100*off.readShare(), off.read, off.written, off.perSecond(),
		100*rr.readShare(), rr.read, rr.written, rr.perSecond())
	require.Zero(t, on.provider, "no provider 429")
	require.Zero(t, off.provider, "no provider 429")
	require.Zero(t, rr.provider, "no provider 429")
	require.GreaterOrEqual(t, on.readShare(), 0.85)
	require.Greater(t, on.readShare(), rr.readShare(), "affinity reads more from the cache than round robin")
	require.Greater(t, on.readShare(), off.readShare(), "affinity reads more from the cache than the ticket's own key")
	for k, n := range on.keyRequest {
		require.Positive(t, n, "key %s serves sessions too", k)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// The Sluice workers use River's fetch timers, so the comparison is of the
// stores, not of the loops around them.
const (
	sluiceClaimCooldown = riverFetchCooldown
	sluicePollInterval  = riverFetchPollInterval
)

// sluiceSystem runs a jobstore.Store with one claim loop shaped like River's
// producer: up to cfg.workers jobs in flight, each on its own goroutine,
// claims woken by Notify, by a poll tick, or by a freed slot after a full
// claim, never closer together than the cooldown. Like the jobs runtime,
// the loop offers its free slots through a jobstore.Handoff while its last
// claim came back short, so jobs submitted meanwhile arrive leased.
type sluiceSystem struct {
	store     jobstore.Store
	workers   int
	noHandoff bool // claims only, as before handoffs
	drop      func() error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

var sqliteSeq atomic.Int64

// sluiceSchema holds the PostgreSQL tables of sluice-postgres (and of the
// bare pattern, which works on them).
const sluiceSchema = "queuebench_sluice"

func openSluicePostgres(ctx context.Context, cfg config) (system, error) {
	pool, drop, err := freshSchema(ctx, cfg.postgres, sluiceSchema, 2)
	if err != nil {
		return nil, err
	}
	pool.Close()
	u, err := url.Parse(cfg.postgres)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", sluiceSchema)
	u.RawQuery = q.Encode()
	st, err := jobstore.Open(ctx, u.String(), jobstore.Options{MaxConns: 24})
	if err != nil {
		return nil, errors.Join(err, drop())
	}
	return &sluiceSystem{store: st, workers: cfg.workers, drop: drop}, nil
}

func openSluiceSQLite(ctx context.Context, cfg config) (system, error) {
	path := filepath.Join(cfg.tmp, fmt.Sprintf("sluice-%d.db", sqliteSeq.Add(1)))
	st, err := jobstore.Open(ctx, "sqlite:"+path, jobstore.Options{})
	if err != nil {
		return nil, err
	}
	return &sluiceSystem{store: st, workers: cfg.workers, drop: func() error { return nil }}, nil
}

// withoutHandoff opens a system whose loop never offers slots (the claim
// path alone), to measure what handoffs change in the same run.
func withoutHandoff(open func(context.Context, config) (system, error)) func(context.Context, config) (system, error) {
	return func(ctx context.Context, cfg config) (system, error) {
		s, err := open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s.(*sluiceSystem).noHandoff = true
		return s, nil
	}
}

func (s *sluiceSystem) fill(ctx context.Context, n int) error {
	now := time.Now()
	for done := 0; done < n; {
		k := min(5000, n-done)
		jobs := make([]jobstore.InsertParams, k)
		for i := range jobs {
			jobs[i] = jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: []byte(requestBody), MaxAttempts: 3, CustomID: fmt.Sprint(i), Now: now}
		}
		if _, err := s.store.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: jobs, Now: now}); err != nil {
			return fmt.Errorf("filling sluice: %w", err)
		}
		done += k
	}
	return nil
}

func (s *sluiceSystem) submit(ctx context.Context) error {
	_, err := s.store.Insert(ctx, jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: []byte(requestBody), MaxAttempts: 3, Now: time.Now()})
	return err
}

func (s *sluiceSystem) start(_ context.Context, started, done func()) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.loop(ctx, started, done) })
	return nil
}

func (s *sluiceSystem) loop(ctx context.Context, started, done func()) {
	notify := s.store.Notify(ctx, "a")
	freed := make(chan struct{}, s.workers)
	tick := time.NewTicker(sluicePollInterval)
	defer tick.Stop()
	inFlight, want, full := 0, true, false
	run := func(j *jobstore.Job) {
		inFlight++
		s.wg.Go(func() {
			started()
			err := s.store.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token,
				Result: jobstore.Result{Status: 200, Body: []byte(`{}`)}, Now: time.Now()})
			if err == nil {
				done()
			}
			freed <- struct{}{}
		})
	}
	h, err := s.store.Handoff(jobstore.HandoffParams{Upstream: "a", Owner: "queuebench", LeaseFor: time.Minute, Capacity: s.workers})
	if err != nil {
		return
	}
	defer func() { h.Close() }() // jobs left over are rescued with their leases; the run is over
	var last time.Time
	for {
		for drained := false; !drained; {
			select {
			case <-freed:
				inFlight--
			case j := <-h.Jobs():
				run(j)
			default:
				drained = true
			}
		}
		// A claim gets up to half the slots; what stays offered keeps
		// taking inserts meanwhile (a drain offers nothing: all go to it).
		free := 0
		if want {
			free = s.workers - inFlight - h.Withdraw(s.workers/2)
		}
		if free > 0 {
			if d := sluiceClaimCooldown - time.Since(last); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			last = time.Now()
			jobs, err := s.store.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: free, Owner: "queuebench", LeaseFor: time.Minute, Now: last})
			if err != nil {
				return
			}
			for _, j := range jobs {
				run(j)
			}
			full = len(jobs) == free
			if full {
				h.Withdraw(-1) // more may be queued: they go before new jobs
			}
			want = full
			if want && inFlight < s.workers {
				continue
			}
		}
		if !full && !s.noHandoff {
			h.Offer(s.workers - inFlight - h.Pending())
		}
		select {
		case <-ctx.Done():
			return
		case j := <-h.Jobs():
			run(j)
		case <-freed:
			inFlight--
			want = want || full
		case <-notify:
			want = true
		case <-tick.C:
			want = true
		}
	}
}

func (s *sluiceSystem) close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	return errors.Join(s.store.Close(), s.drop())
}

package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
)

var quiet = slog.New(slog.DiscardHandler)

// outageStore fails result writes and claims (and, with heartbeats set,
// lease renewals) as an unreachable store does, while down is set; the
// test's own rescues reach the store as another node's would.
type outageStore struct {
	jobstore.Store
	down, heartbeats atomic.Bool
	completes, hbs   atomic.Int64 // calls while down
}

func errOutage(what string) error {
	return fmt.Errorf("%w: %s: test outage", jobstore.ErrUnavailable, what)
}

func (o *outageStore) Complete(ctx context.Context, p jobstore.CompleteParams) error {
	if o.down.Load() {
		o.completes.Add(1)
		return errOutage("completing")
	}
	return o.Store.Complete(ctx, p)
}

func (o *outageStore) CompleteSpooled(ctx context.Context, p jobstore.CompleteParams) error {
	if o.down.Load() {
		return errOutage("completing from the spool")
	}
	return o.Store.CompleteSpooled(ctx, p)
}

func (o *outageStore) Claim(ctx context.Context, p jobstore.ClaimParams) ([]*jobstore.Job, error) {
	if o.down.Load() {
		return nil, errOutage("claiming")
	}
	return o.Store.Claim(ctx, p)
}

func (o *outageStore) Heartbeat(ctx context.Context, p jobstore.HeartbeatParams) error {
	if o.down.Load() {
		o.hbs.Add(1)
		if o.heartbeats.Load() {
			return errOutage("heartbeat")
		}
	}
	return o.Store.Heartbeat(ctx, p)
}

// TestHeldAnswerOutlivesTheOutage drives a worker holding an answer through
// a store outage on the fake clock. The answer is in the spool from its
// first failed write, before any retry (a crash from then on cannot lose
// it), as the worker's own entry. While its heartbeats get through it
// keeps retrying the write and its lease (the rescuer takes nothing, the
// write-back leaves the entry alone) and removes the entry once the store
// took the answer; when they do not, it hands the entry to the write-back
// one heartbeat before the lease could run out, and the answer is written
// back before the job is claimed again. Either way the job is called once.
func TestHeldAnswerOutlivesTheOutage(t *testing.T) {
	t.Parallel()
	const lease, beat = 30 * time.Second, 10 * time.Second
	tests := []struct {
		name           string
		heartbeatsFail bool
		spoolFull      bool // the spool cannot take the answer (full, or on the full disk)
	}{
		{"heartbeats pass", false, false},
		{"heartbeats fail", true, false},
		{"heartbeats fail, spool full", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &outageStore{Store: openStore(t)}
			st.heartbeats.Store(tc.heartbeatsFail)
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			d, entered, release := gated(okMessage)
			s := newService(t, st, d, nil, func(c *Config) {
				c.Clock, c.RescueInterval, c.LeaseFor, c.HeartbeatEvery, c.Logger = clk, -1, lease, beat, quiet
				c.SpoolDir = filepath.Join(t.TempDir(), "spool")
				if tc.spoolFull {
					c.SpoolMaxBytes = 1
				}
			})
			j := submit(t, s, "")
			<-entered
			claimed := clk.Now()
			st.down.Store(true)
			release()
			require.Eventually(t, func() bool { return st.completes.Load() == 1 }, 5*time.Second, time.Millisecond)
			if !tc.spoolFull {
				require.Eventually(t, func() bool { return s.spool.len() == 1 }, 5*time.Second, time.Millisecond,
					"spooled at the first failed write")
				require.Equal(t, claimed, clk.Now(), "before any retry")
				require.True(t, s.spoolEmpty(), "the worker's own entry: nothing waits for the write-back")
			}
			rescue := func() jobstore.RescueResult {
				r, err := st.Rescue(context.Background(), jobstore.RescueParams{MaxStalls: 3, Now: clk.Now()})
				require.NoError(t, err)
				return r
			}
			// Each step moves the clock a second at a time until the next
			// heartbeat and a write retry have happened. (Counting pending timers
			// cannot tell when the worker is asleep: the webhook sender's poll
			// timer comes and goes beside the worker's.)
			step := func() {
				c, h := st.completes.Load(), st.hbs.Load()
				seconds, looks := 0, 0
				require.Eventually(t, func() bool {
					// Spooled or held ends the worker's heartbeats: that ends a step too.
					if (st.hbs.Load() > h && st.completes.Load() > c) || !s.spoolEmpty() || s.holds(j.ID) {
						return true
					}
					// Another second once the worker had fifty looks to act on the last.
					if looks++; looks%50 == 1 && seconds < 3*int(beat/time.Second) {
						clk.WaitForTimers(3, 20*time.Millisecond)
						clk.Advance(time.Second)
						seconds++
					}
					return false
				}, 30*time.Second, time.Millisecond, "no heartbeat and write retry within %v of fake time", 3*beat)
			}
			if !tc.heartbeatsFail {
				for range 6 { // twice the lease
					step()
				}
				require.Equal(t, jobstore.RescueResult{}, rescue(), "a worker holding its answer keeps its lease")
				require.Equal(t, 1, s.spool.len(), "the answer stays on disk")
				require.True(t, s.spoolEmpty(), "owned by its worker while its lease is renewed")
			} else if tc.spoolFull {
				for !s.holds(j.ID) {
					step()
				}
				require.Less(t, clk.Now().Sub(claimed), lease, "held before the lease ran out")
				clk.Advance(lease)
				require.Equal(t, jobstore.RescueResult{Requeued: 1}, rescue())
				require.True(t, s.holds(j.ID), "the answer is still held in memory")
			} else {
				for s.spoolEmpty() {
					step()
				}
				require.Less(t, clk.Now().Sub(claimed), lease, "handed to the write-back before the lease ran out")
				require.Equal(t, jobstore.RescueResult{}, rescue())
				clk.Advance(lease)
				require.Equal(t, jobstore.RescueResult{Requeued: 1}, rescue(), "the rescuer takes the job back: harmless")
			}
			st.down.Store(false)
			for {
				got, err := st.Get(context.Background(), j.ID)
				require.NoError(t, err)
				if got.State == jobstore.StateSucceeded {
					require.JSONEq(t, okMessage, string(got.Result.Body))
					break
				}
				clk.WaitForTimers(4, 100*time.Millisecond)
				clk.Advance(time.Second)
			}
			require.Equal(t, 1, d.Calls(), "the held answer was never paid for twice")
			// The replay deletes its spool file after the store took the
			// answer, so the file may outlive the read above by a moment.
			require.Eventually(t, func() bool { return s.spool.len() == 0 }, 5*time.Second, time.Millisecond, "the spool is emptied")
			require.Eventually(t, func() bool { return !s.holds(j.ID) }, 5*time.Second, time.Millisecond, "the held answer is let go")
		})
	}
}

func (s *Service) holds(id int64) bool {
	s.answers.mu.Lock()
	defer s.answers.mu.Unlock()
	_, ok := s.answers.held[id]
	return ok
}

// TestSpoolBounds: the spool refuses entries past its bounds in bytes and
// in entries, a rewrite of one lease's entry replaces it, and a reopened
// spool counts what is on disk (and drops half-written files).
func TestSpoolBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entry := func(id int64, body int) spoolEntry {
		return spoolEntry{JobID: id, Token: 1, Upstream: "claude",
			Complete: &jobstore.Result{Status: 200, Body: make([]byte, body)}}
	}
	sp, err := openSpool(dir, 4096, 2)
	require.NoError(t, err)
	require.NoError(t, sp.put(entry(1, 100)))
	require.NoError(t, sp.put(entry(1, 200)), "the same lease's entry is replaced")
	require.Equal(t, 1, sp.len())
	require.ErrorIs(t, sp.put(entry(2, 8192)), errSpoolFull, "past the byte bound")
	require.NoError(t, sp.put(entry(2, 100)))
	require.ErrorIs(t, sp.put(entry(3, 10)), errSpoolFull, "past the entry bound")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "job-9-1.json.123"+spoolTemp), []byte("{"), 0o600))

	again, err := openSpool(dir, 4096, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"job-1-1.json", "job-2-1.json"}, again.names())
	require.Equal(t, sp.bytes, again.bytes)
	_, err = os.Stat(filepath.Join(dir, "job-9-1.json.123"+spoolTemp))
	require.ErrorIs(t, err, os.ErrNotExist, "a half-written entry is dropped")
	e, err := again.load("job-1-1.json")
	require.NoError(t, err)
	require.Len(t, e.Complete.Body, 200)
	require.NoError(t, again.remove("job-1-1.json"))
	require.NoError(t, again.put(entry(3, 10)), "room again")
}

// TestSpoolReplaysAfterRestart: a gateway spooled answers and died; a new
// Service on the same spool directory writes them back before it claims
// anything, so the jobs (requeued by the rescuer meanwhile) are not
// called again; a replay of an entry already applied changes nothing.
func TestSpoolReplaysAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	dir := filepath.Join(t.TempDir(), "spool")
	t0 := time.Now()
	insert := func(content string) int64 {
		r, err := st.Insert(ctx, jobstore.InsertParams{Upstream: "claude", Path: "/v1/messages",
			Body: []byte(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` + content + `"}]}`), MaxAttempts: 3, Now: t0})
		require.NoError(t, err)
		return r.Job.ID
	}
	held, canceled, fresh := insert("held"), insert("canceled"), insert("fresh")
	claimed, err := st.Claim(ctx, jobstore.ClaimParams{Upstream: "claude", Limit: 2, Owner: "dead gateway", LeaseFor: time.Second, Now: t0})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	// The dead gateway's spool: both answers.
	sp, err := openSpool(dir, SpoolMaxBytesDefault, SpoolMaxEntriesDefault)
	require.NoError(t, err)
	for _, j := range claimed {
		require.NoError(t, sp.put(spoolEntry{JobID: j.ID, Token: j.Lease.Token, Upstream: "claude", BodySHA256: bodyHash(j.Body),
			Complete: &jobstore.Result{Status: 200, Body: []byte(`{"spooled":` + fmt.Sprint(j.ID) + `}`)}, SpooledAt: t0}))
	}
	// An entry from another store (the same id is another job there): set
	// aside, never applied.
	require.NoError(t, sp.put(spoolEntry{JobID: fresh, Token: 1, Upstream: "claude", BodySHA256: bodyHash([]byte("another job")),
		Complete: &jobstore.Result{Status: 200, Body: []byte(`{"foreign":true}`)}}))
	// Meanwhile its leases expired and the rescuer requeued both; one was
	// canceled by its submitter.
	r, err := st.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: t0.Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 2, r.Requeued)
	_, err = st.Cancel(ctx, jobstore.CancelParams{ID: canceled, Now: t0.Add(time.Minute)})
	require.NoError(t, err)

	d := succeed()
	s := newService(t, st, d, nil, func(c *Config) { c.SpoolDir, c.Logger = dir, quiet })
	got := waitFor(t, st, held, jobstore.StateSucceeded)
	require.JSONEq(t, fmt.Sprintf(`{"spooled":%d}`, held), string(got.Result.Body))
	f := waitFor(t, st, fresh, jobstore.StateSucceeded)
	require.JSONEq(t, okMessage, string(f.Result.Body), "the foreign entry was not applied")
	_, err = os.Stat(filepath.Join(dir, fmt.Sprintf("job-%d-1.json", fresh)+spoolBad))
	require.NoError(t, err, "the foreign entry is set aside for an operator")
	c, err := st.Get(ctx, canceled)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, c.State, "a spooled answer never overrides a cancel")
	require.Equal(t, 1, d.Calls(), "only the job without a spooled answer was called")
	require.True(t, s.spoolEmpty())

	// A crash between the write-back and the file's removal replays the
	// entry again: nothing changes.
	for _, j := range claimed {
		if j.ID == held {
			require.NoError(t, s.spool.put(spoolEntry{JobID: j.ID, Token: j.Lease.Token, Upstream: "claude", BodySHA256: bodyHash(j.Body),
				Complete: &jobstore.Result{Status: 200, Body: []byte(`{"other":true}`)}}))
		}
	}
	require.True(t, s.replaySpool(ctx))
	again, err := st.Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, got.Result, again.Result)
	require.Equal(t, got.FinishedAt, again.FinishedAt)
}

// FuzzDecodeSpoolEntry: the spool reader never panics on a damaged file,
// and what it accepts it writes back the same.
func FuzzDecodeSpoolEntry(f *testing.F) {
	f.Add([]byte(`{"v":1,"job_id":3,"lease_token":2,"upstream":"u","complete":{"Status":200,"Body":"e30="}}`))
	f.Add([]byte(`{"v":1,"job_id":3,"lease_token":2,"fail":{"Kind":2}}`))
	f.Add([]byte(`{"v":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeSpoolEntry(b)
		if err != nil {
			return
		}
		require.Positive(t, e.JobID)
		require.True(t, (e.Complete == nil) != (e.Fail == nil))
	})
}

// TestSpoolDirIsLogged: the runtime says where its result spool is, as an
// absolute path, since a relative default lands in the working directory
// (issue 27: it was created there without a word).
func TestSpoolDirIsLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	dir := filepath.Join(t.TempDir(), "spool")
	newService(t, nil, succeed(), nil, func(c *Config) {
		c.SpoolDir, c.Logger, c.Owner = dir, slog.New(slog.NewJSONHandler(&logs, nil)), "manual"
	})
	var rec map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		if r["msg"] == "job result spool" {
			rec = r
		}
	}
	require.NotNil(t, rec, logs.String())
	require.Equal(t, dir, rec["dir"])
	require.EqualValues(t, 0, rec["entries"])
}

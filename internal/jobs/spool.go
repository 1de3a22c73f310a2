package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// errSpoolFull means a result did not fit in the spool's bounds.
var errSpoolFull = errors.New("job result spool is full")

// spoolVersion is the format of a spool entry; an entry of another
// version is set aside, never guessed at.
const spoolVersion = 1

// spoolSuffix names a complete entry; spoolTemp an entry being written
// (left behind only by a crash mid-write, and removed on open).
const (
	spoolSuffix = ".json"
	spoolTemp   = ".tmp"
	spoolBad    = ".bad"
)

// spoolEntry is one finished result the store could not take: the job,
// its lease's fencing token, and the verdict (a success's result or a
// terminal failure's params). Its fields are the file format.
type spoolEntry struct {
	Version  int    `json:"v"`
	JobID    int64  `json:"job_id"`
	Token    int64  `json:"lease_token"`
	Upstream string `json:"upstream"`
	// BodySHA256 is the hex SHA-256 of the job's request body: a replay
	// checks it, so a spool directory pointed at another store (where the
	// same id is another job) never completes the wrong job.
	BodySHA256 string               `json:"body_sha256"`
	WebhookURL string               `json:"webhook_url,omitempty"`
	Complete   *jobstore.Result     `json:"complete,omitempty"`
	Fail       *jobstore.FailParams `json:"fail,omitempty"`
	SpooledAt  time.Time            `json:"spooled_at"`
}

// name is the entry's file name: one per lease, so a retried spool write
// of the same answer replaces itself.
func (e spoolEntry) name() string {
	return "job-" + strconv.FormatInt(e.JobID, 10) + "-" + strconv.FormatInt(e.Token, 10) + spoolSuffix
}

// decodeSpoolEntry parses an entry file's bytes.
func decodeSpoolEntry(b []byte) (spoolEntry, error) {
	var e spoolEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return spoolEntry{}, fmt.Errorf("decoding spool entry: %w", err)
	}
	switch {
	case e.Version != spoolVersion:
		return spoolEntry{}, fmt.Errorf("decoding spool entry: version %d, want %d", e.Version, spoolVersion)
	case e.JobID < 1:
		return spoolEntry{}, fmt.Errorf("decoding spool entry: job id %d", e.JobID)
	case (e.Complete == nil) == (e.Fail == nil):
		return spoolEntry{}, errors.New("decoding spool entry: want exactly one of complete and fail")
	}
	return e, nil
}

// spool is a directory of finished results the store could not take. A
// worker writes its answer here as soon as the store fails it (or before
// its first write while the store is known to be away), so a crash cannot
// lose it, and keeps the entry as its own (owned) while it goes on
// writing to the store under its lease: the store taking it removes the
// entry; the lease no longer trusted, or the gateway stopping, hands it to
// the write-back. Each entry is written to a temporary file, fsynced,
// renamed into place and the directory fsynced, so an entry is either
// whole or absent after a crash. The spool is bounded in bytes and in
// entries: a result that does not fit is not kept (the job is then called
// again after its lease expires, as before the spool existed). Entries
// nobody owns are written back by Service.replaySpool before any claim.
// Safe for concurrent use.
type spool struct {
	dir        string
	maxBytes   int64
	maxEntries int

	mu    sync.Mutex
	sizes map[string]int64 // entry name → bytes
	bytes int64
	owned map[string]bool // entries a running worker still writes to the store itself
}

// openSpool opens (creating it) the spool directory dir and accounts for
// the entries already there; temporary files left by a crash are removed.
func openSpool(dir string, maxBytes int64, maxEntries int) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening job result spool: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("opening job result spool: %w", err)
	}
	sp := &spool{dir: dir, maxBytes: maxBytes, maxEntries: maxEntries, sizes: map[string]int64{}, owned: map[string]bool{}}
	for _, de := range ents {
		switch name := de.Name(); {
		case strings.HasSuffix(name, spoolTemp):
			_ = os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, spoolSuffix) && de.Type().IsRegular():
			fi, err := de.Info()
			if err != nil {
				return nil, fmt.Errorf("opening job result spool: %w", err)
			}
			sp.sizes[name] = fi.Size()
			sp.bytes += fi.Size()
		}
	}
	return sp, nil
}

// len is the number of entries.
func (sp *spool) len() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.sizes)
}

// waiting is the number of entries no worker owns: those the write-back
// has to apply.
func (sp *spool) waiting() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	for name := range sp.sizes {
		if !sp.owned[name] {
			n++
		}
	}
	return n
}

// names lists the entries no worker owns, in name order.
func (sp *spool) names() []string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := make([]string, 0, len(sp.sizes))
	for n := range sp.sizes {
		if !sp.owned[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// putOwned writes e durably as an entry the calling worker owns (the
// write-back leaves it alone until release), and returns its name; or
// errSpoolFull when it does not fit.
func (sp *spool) putOwned(e spoolEntry) (string, error) {
	name := e.name()
	sp.mu.Lock()
	sp.owned[name] = true // before the file exists: no write-back may see it unowned
	sp.mu.Unlock()
	if err := sp.put(e); err != nil {
		sp.release(name)
		return "", err
	}
	return name, nil
}

// release hands an owned entry to the write-back.
func (sp *spool) release(name string) {
	sp.mu.Lock()
	delete(sp.owned, name)
	sp.mu.Unlock()
}

// put writes e durably, or returns errSpoolFull when it does not fit.
func (sp *spool) put(e spoolEntry) error {
	e.Version = spoolVersion
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("spooling job %d: %w", e.JobID, err)
	}
	name := e.name()
	sp.mu.Lock()
	defer sp.mu.Unlock() // one writer at a time keeps the bounds exact
	old, replacing := sp.sizes[name]
	entries, bytes := len(sp.sizes), sp.bytes-old+int64(len(b))
	if !replacing {
		entries++
	}
	if entries > sp.maxEntries || bytes > sp.maxBytes {
		return fmt.Errorf("spooling job %d (%d bytes; %d entries, %d bytes held): %w", e.JobID, len(b), len(sp.sizes), sp.bytes, errSpoolFull)
	}
	if err := writeFileSynced(sp.dir, name, b); err != nil {
		return fmt.Errorf("spooling job %d: %w", e.JobID, err)
	}
	sp.sizes[name] = int64(len(b))
	sp.bytes = bytes
	return nil
}

// load reads an entry.
func (sp *spool) load(name string) (spoolEntry, error) {
	b, err := os.ReadFile(filepath.Join(sp.dir, name))
	if err != nil {
		return spoolEntry{}, fmt.Errorf("reading spool entry %s: %w", name, err)
	}
	return decodeSpoolEntry(b)
}

// remove deletes an entry that the store took.
func (sp *spool) remove(name string) error {
	err := os.Remove(filepath.Join(sp.dir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing spool entry %s: %w", name, err)
	}
	sp.forget(name)
	return syncDir(sp.dir)
}

// setAside renames an entry that cannot be read so replay goes on; an
// operator can inspect it.
func (sp *spool) setAside(name string) error {
	err := os.Rename(filepath.Join(sp.dir, name), filepath.Join(sp.dir, name+spoolBad))
	sp.forget(name)
	if err != nil {
		return fmt.Errorf("setting spool entry %s aside: %w", name, err)
	}
	return nil
}

func (sp *spool) forget(name string) {
	sp.mu.Lock()
	sp.bytes -= sp.sizes[name]
	delete(sp.sizes, name)
	delete(sp.owned, name)
	sp.mu.Unlock()
}

// writeFileSynced writes b to dir/name atomically and durably: a temporary
// file, fsync, rename, fsync of the directory.
func writeFileSynced(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, name+".*"+spoolTemp)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// replaySpool writes the spooled results no worker owns back to the
// store, oldest name first, and reports whether none is left waiting. The worker loops call it
// before every store read that leads to a claim, so a spooled result is
// applied before its job could be claimed again: at start-up, and as soon
// as the store answers after an outage.
func (s *Service) replaySpool(ctx context.Context) bool {
	if s.spoolEmpty() {
		return true
	}
	s.replayMu.Lock()
	defer s.replayMu.Unlock()
	for _, name := range s.spool.names() {
		e, err := s.spool.load(name)
		if err != nil {
			s.cfg.Logger.Error("setting aside an unreadable spooled job result", "entry", name, "err", err)
			if err := s.spool.setAside(name); err != nil {
				s.cfg.Logger.Error("setting aside an unreadable spooled job result", "entry", name, "err", err)
				return false
			}
			continue
		}
		if !s.applySpooled(ctx, name, e) {
			return false
		}
	}
	return s.spoolEmpty()
}

// applySpooled writes one spooled result back: a success through
// CompleteSpooled (which keeps it even after a rescue), a terminal
// failure through Fail with its lease's token. It reports false when the
// store could not be written (the entry stays for the next replay).
func (s *Service) applySpooled(ctx context.Context, name string, e spoolEntry) bool {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	j, err := s.store.Get(wctx, e.JobID)
	if err == nil && bodyHash(j.Body) != e.BodySHA256 {
		s.cfg.Logger.Error("setting aside a spooled job result of another job (was the spool directory moved to another store?)",
			"job", e.JobID, "entry", name)
		if err := s.spool.setAside(name); err != nil {
			s.cfg.Logger.Error("setting aside a spooled job result", "entry", name, "err", err)
			return false
		}
		return true
	}
	now := s.cfg.Clock.Now()
	st := jobstore.StateSucceeded
	switch {
	case err != nil:
		// ErrNotFound (deleted: dropped below), or the store is away.
	case e.Complete != nil:
		// No claim here may start the job's call while its answer goes in.
		_, err = s.answers.completeLost(e.JobID, e.Token, false, now, s.cfg.LeaseFor, func() error {
			return s.store.CompleteSpooled(wctx, jobstore.CompleteParams{ID: e.JobID, Token: e.Token, Result: *e.Complete, Now: now})
		})
	default:
		p := *e.Fail
		p.ID, p.Token, p.Now = e.JobID, e.Token, now
		st, err = s.store.Fail(wctx, p)
	}
	switch {
	case err == nil:
		s.cfg.Logger.Info("wrote a spooled job result back to the store", "job", e.JobID, "state", st)
		s.finishedHere(e.Upstream, e.WebhookURL, st)
	case errors.Is(err, jobstore.ErrConflict), errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
		// Finished meanwhile (or, for a failure, taken back by the
		// rescuer): the store's state stands; an earlier replay may have
		// written this very entry before a crash kept its file.
		s.cfg.Logger.Warn("dropping a spooled job result the store no longer takes", "job", e.JobID, "err", err)
	case errors.Is(err, jobstore.ErrUnavailable), wctx.Err() != nil:
		// The store is still away: keep the entry, claim nothing.
		s.cfg.Logger.Warn("writing spooled job results back to the store", "job", e.JobID, "err", err)
		return false
	default:
		// The store answers but refuses this entry: it must not hold every
		// claim back for ever. Set it aside for an operator.
		s.cfg.Logger.Error("setting aside a spooled job result the store refuses", "job", e.JobID, "err", err)
		if err := s.spool.setAside(name); err != nil {
			s.cfg.Logger.Error("setting aside a spooled job result", "entry", name, "err", err)
			return false
		}
		return true
	}
	if err := s.spool.remove(name); err != nil {
		// Applying it again is harmless: the job is finished now.
		s.cfg.Logger.Error("removing a written-back spooled job result", "entry", name, "err", err)
		return false
	}
	return true
}

// spoolEmpty reports whether no spooled result waits to be written back
// (an entry a running worker owns waits on that worker, under its lease).
func (s *Service) spoolEmpty() bool { return s.spool == nil || s.spool.waiting() == 0 }

// bodyHash is the hex SHA-256 of a job's request body.
func bodyHash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

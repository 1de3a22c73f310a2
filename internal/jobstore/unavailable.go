package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicehq/sluice/internal/llm"
)

// unavailable wraps err with ErrUnavailable when it says the store cannot
// answer now (see ErrUnavailable); ctx is the caller's, so a deadline of
// the caller's own is not taken for an outage. Other errors come back as
// they are.
func unavailable(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !outage(ctx, err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// outage reports whether err is the store being unreachable, full,
// read-only or locked, rather than a fault of the request.
func outage(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller gave up or was canceled: not the store's fault
	}
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY,
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOLFS:
			return true
		}
		return false
	}
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),       // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(pe.Code, "57P"),      // admin shutdown, crash shutdown, cannot connect now
			pe.Code == "25006",                     // read-only SQL transaction (a standby)
			pe.Code == "40001", pe.Code == "40P01": // serialization failure, deadlock: a retry may pass
			return true
		}
		return false
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, context.DeadlineExceeded),
		pgconn.Timeout(err):
		return true
	}
	// pgx reports a connection it closed after a network failure as a
	// plain error.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// edgeStore maps a backend's outage errors to ErrUnavailable at the edge
// of the store, so every caller (the runtime, the API, the CLI) branches
// on the sentinel and never on a driver's error. Methods it does not list
// pass through as the backend answers them.
type edgeStore struct {
	Store
}

// withEdge wraps a backend's store.
func withEdge(s Store) Store { return edgeStore{Store: s} }

// backend returns the store under the edge.
func backend(s Store) Store {
	if e, ok := s.(edgeStore); ok {
		return e.Store
	}
	return s
}

func (e edgeStore) Insert(ctx context.Context, p InsertParams) (InsertResult, error) {
	r, err := e.Store.Insert(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Get(ctx context.Context, id int64) (*Job, error) {
	j, err := e.Store.Get(ctx, id)
	return j, unavailable(ctx, err)
}

func (e edgeStore) List(ctx context.Context, p ListParams) (JobPage, error) {
	r, err := e.Store.List(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Claim(ctx context.Context, p ClaimParams) ([]*Job, error) {
	r, err := e.Store.Claim(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	return unavailable(ctx, e.Store.Heartbeat(ctx, p))
}

func (e edgeStore) Complete(ctx context.Context, p CompleteParams) error {
	return unavailable(ctx, e.Store.Complete(ctx, p))
}

func (e edgeStore) CompleteSpooled(ctx context.Context, p CompleteParams) error {
	return unavailable(ctx, e.Store.CompleteSpooled(ctx, p))
}

func (e edgeStore) Fail(ctx context.Context, p FailParams) (State, error) {
	r, err := e.Store.Fail(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Cancel(ctx context.Context, p CancelParams) (CancelResult, error) {
	r, err := e.Store.Cancel(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Requeue(ctx context.Context, p RequeueParams) (int, error) {
	r, err := e.Store.Requeue(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Rescue(ctx context.Context, p RescueParams) (RescueResult, error) {
	r, err := e.Store.Rescue(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) DeleteFinished(ctx context.Context, p DeleteFinishedParams) (int, error) {
	r, err := e.Store.DeleteFinished(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) SetPaused(ctx context.Context, p PauseParams) error {
	return unavailable(ctx, e.Store.SetPaused(ctx, p))
}

func (e edgeStore) PausedUpstreams(ctx context.Context) ([]string, error) {
	r, err := e.Store.PausedUpstreams(ctx)
	return r, unavailable(ctx, err)
}

func (e edgeStore) CreateBatch(ctx context.Context, p CreateBatchParams) (*Batch, error) {
	r, err := e.Store.CreateBatch(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) GetBatch(ctx context.Context, id string) (*Batch, error) {
	r, err := e.Store.GetBatch(ctx, id)
	return r, unavailable(ctx, err)
}

func (e edgeStore) BatchJobs(ctx context.Context, p BatchJobsParams) (BatchPage, error) {
	r, err := e.Store.BatchJobs(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) CancelBatch(ctx context.Context, p CancelBatchParams) (CancelBatchResult, error) {
	r, err := e.Store.CancelBatch(ctx, p)
	return r, unavailable(ctx, err)
}

func (e edgeStore) Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error) {
	r, err := e.Store.Backlog(ctx, upstream, now, limit)
	return r, unavailable(ctx, err)
}

func (e edgeStore) NextAvailable(ctx context.Context, upstream string) (time.Time, bool, error) {
	at, ok, err := e.Store.NextAvailable(ctx, upstream)
	return at, ok, unavailable(ctx, err)
}

func (e edgeStore) CountLive(ctx context.Context, now time.Time) ([]LiveCount, error) {
	r, err := e.Store.CountLive(ctx, now)
	return r, unavailable(ctx, err)
}

// checkSQLiteDir explains, before SQLite's "unable to open database file
// (14)", why a store file cannot be created or written: its directory is
// missing, is not a directory, or is not writable (SQLite also writes its
// -wal and -shm files there).
func checkSQLiteDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("the directory %s cannot be read: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	// Probe by creating a file: permission bits do not tell about
	// read-only mounts, ACLs or another user's ownership.
	f, err := os.CreateTemp(dir, ".sluice-probe-*")
	if err != nil {
		reason := "permission denied"
		switch {
		case errors.Is(err, syscall.EROFS):
			reason = "read-only file system"
		case errors.Is(err, syscall.ENOSPC):
			reason = "no space left on device"
		case !errors.Is(err, os.ErrPermission):
			reason = err.Error()
		}
		return fmt.Errorf("the directory %s is not writable (%s)", dir, reason)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	fi, err = os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // created on open
	case err != nil:
		return fmt.Errorf("the file %s cannot be read: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	}
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("the file %s is not writable (%w)", path, err)
	}
	return f.Close()
}

func (e edgeStore) ClaimDeliveries(ctx context.Context, p ClaimDeliveriesParams) ([]*WebhookDelivery, error) {
	ds, err := e.Store.ClaimDeliveries(ctx, p)
	return ds, unavailable(ctx, err)
}

func (e edgeStore) RecordDelivery(ctx context.Context, p RecordDeliveryParams) error {
	return unavailable(ctx, e.Store.RecordDelivery(ctx, p))
}

func (e edgeStore) Deliveries(ctx context.Context, jobID int64) ([]*WebhookDelivery, error) {
	ds, err := e.Store.Deliveries(ctx, jobID)
	return ds, unavailable(ctx, err)
}

func (e edgeStore) Redeliver(ctx context.Context, p RedeliverParams) (*WebhookDelivery, error) {
	d, err := e.Store.Redeliver(ctx, p)
	return d, unavailable(ctx, err)
}

func (e edgeStore) DeliveryStats(ctx context.Context) (DeliveryStats, error) {
	st, err := e.Store.DeliveryStats(ctx)
	return st, unavailable(ctx, err)
}

func (e edgeStore) AddSpend(ctx context.Context, p AddSpendParams) error {
	return unavailable(ctx, e.Store.AddSpend(ctx, p))
}

func (e edgeStore) Spend(ctx context.Context, p SpendParams) ([]SpendEntry, error) {
	out, err := e.Store.Spend(ctx, p)
	return out, unavailable(ctx, err)
}

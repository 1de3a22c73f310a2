package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
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
// on the sentinel and never on a driver's error. Its methods, one per
// Store method that takes a context and returns an error, are generated
// from the Store interface (edge_store.go); the others (Notify, Handoff,
// Close) pass through as the backend answers them.
//
//go:generate go test -run TestEdgeStoreIsGenerated -update-edge .
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

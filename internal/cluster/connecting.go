package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/storelink"
)

// ErrNotConnected answers a call to a Connecting backend whose store has
// not been opened yet: to a Node or Tenants, a store that does not
// answer (they fall back to a local share).
var ErrNotConnected = errors.New("cluster: the shared store is not connected yet")

// Connecting is a Backend whose store is opened in the background
// (storelink.Link): until it is, every call answers ErrNotConnected at
// once, so a node starts on its fallback share without waiting for the
// store, and shares as soon as the store answers. The outcome of every
// call tells the link whether the store is still reachable.
type Connecting struct {
	openFn func(ctx context.Context) (Backend, error)
	link   *storelink.Link
	b      atomic.Pointer[Backend]
	closed sync.Once
}

// NewConnecting returns a Connecting backend for the shared store named
// by dsn (Config.Store); lc tunes its link (Name and Open are set here).
// Start it to begin connecting.
func NewConnecting(dsn string, lc storelink.Config) (*Connecting, error) {
	return newConnecting(func(ctx context.Context) (Backend, error) { return Open(ctx, dsn) }, lc)
}

// newConnecting is NewConnecting with the opening given (tests).
func newConnecting(open func(ctx context.Context) (Backend, error), lc storelink.Config) (*Connecting, error) {
	c := &Connecting{openFn: open}
	lc.Name, lc.Open, lc.Ping = "cluster", c.open, nil
	l, err := storelink.New(lc)
	if err != nil {
		return nil, fmt.Errorf("cluster store: %w", err)
	}
	c.link = l
	return c, nil
}

// Start begins connecting in the background; it returns at once.
func (c *Connecting) Start(ctx context.Context) error { return c.link.Start(ctx) }

// Await waits up to d for the store to open (storelink.Link.Await).
func (c *Connecting) Await(ctx context.Context, d time.Duration) bool { return c.link.Await(ctx, d) }

// State is the store's state (storelink.Link.State).
func (c *Connecting) State() (storelink.State, int, error) { return c.link.State() }

func (c *Connecting) open(ctx context.Context) error {
	b, err := c.openFn(ctx)
	if err != nil {
		return err
	}
	c.b.Store(&b)
	return nil
}

func (c *Connecting) backend() Backend {
	if b := c.b.Load(); b != nil {
		return *b
	}
	return nil
}

// report tells the link how a call to the open store went: an answer
// (a duplicate node or a bad report is one) or an outage. A call its
// caller canceled says nothing of the store.
func (c *Connecting) report(err error) {
	switch {
	case errors.Is(err, context.Canceled):
		return
	case err == nil, errors.Is(err, ErrDuplicateNode), errors.Is(err, ErrBadReport):
		c.link.Report(nil)
	default:
		c.link.Report(err)
	}
}

// Sync implements Backend.
func (c *Connecting) Sync(ctx context.Context, r Report) (Grant, error) {
	b := c.backend()
	if b == nil {
		return Grant{}, ErrNotConnected
	}
	g, err := b.Sync(ctx, r)
	c.report(err)
	return g, err
}

// Leave implements Backend.
func (c *Connecting) Leave(ctx context.Context, key, node, incarnation string) error {
	b := c.backend()
	if b == nil {
		return nil // nothing was written: nothing to give back
	}
	err := b.Leave(ctx, key, node, incarnation)
	c.report(err)
	return err
}

// Lead implements Backend.
func (c *Connecting) Lead(ctx context.Context, name, node, incarnation string, ttl time.Duration) (bool, error) {
	b := c.backend()
	if b == nil {
		return false, ErrNotConnected
	}
	ok, err := b.Lead(ctx, name, node, incarnation, ttl)
	c.report(err)
	return ok, err
}

// Listen implements Listener: once the store is open, it listens on it
// when it can announce changes.
func (c *Connecting) Listen(ctx context.Context, changed func(key string)) {
	select {
	case <-ctx.Done():
		return
	case <-c.link.Opened():
	}
	if l, ok := c.backend().(Listener); ok {
		l.Listen(ctx, changed)
	}
}

// Close ends the attempts to connect (one under way is canceled) and
// closes the store if it was opened. It is idempotent.
func (c *Connecting) Close() error {
	var err error
	c.closed.Do(func() {
		err = c.link.Stop(context.Background())
		if b := c.backend(); b != nil {
			err = errors.Join(err, b.Close())
		}
	})
	return err
}

var _ interface {
	Backend
	Listener
} = (*Connecting)(nil)

package membudget

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/clock"
)

// ErrFull is returned when a reservation found no room in time.
var ErrFull = errors.New("the gateway's limit of request bytes in flight is reached")

// Bytes counts the bytes of request bodies in flight against a limit.
// Its methods are safe for concurrent use.
type Bytes struct {
	limit int64
	wait  time.Duration
	clock clock.Clock

	mu   sync.Mutex
	used int64
	// freed is closed (and replaced) whenever bytes are released, waking
	// the reservations waiting for room.
	freed chan struct{}

	inFlight prometheus.Gauge
	refused  prometheus.Counter
}

// NewBytes returns a budget of limit bytes whose reservations wait up to
// wait for room on c, with its metrics (sluice_request_bytes_in_flight,
// sluice_requests_refused_total{reason="memory"}) registered on reg when
// it is not nil.
func NewBytes(limit int64, wait time.Duration, c clock.Clock, reg prometheus.Registerer) *Bytes {
	b := &Bytes{
		limit: limit, wait: wait, clock: clock.Or(c), freed: make(chan struct{}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_request_bytes_in_flight",
			Help: "Bytes of request bodies reserved by requests in flight (max_request_bytes_in_flight bounds them).",
		}),
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_requests_refused_total",
		Help: "Requests refused by the gateway before scheduling, by reason.",
	}, []string{"reason"})
	b.refused = refused.WithLabelValues("memory")
	if reg != nil {
		reg.MustRegister(b.inFlight, refused)
	}
	return b
}

// Limit is b's limit in bytes.
func (b *Bytes) Limit() int64 { return b.limit }

// fits reports whether n more bytes fit. A body larger than the whole
// limit fits only when nothing else is in flight. b.mu must be held.
func (b *Bytes) fits(n int64) bool {
	return b.used+n <= b.limit || b.used == 0
}

// Take reserves n bytes; force skips the check (a small request). It
// waits up to b's wait for room, then fails with ErrFull (counted as a
// refusal); it returns ctx's cause if ctx ends first.
func (b *Bytes) Take(ctx context.Context, n int64, force bool) error {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		if force || b.fits(n) {
			b.used += n
			b.mu.Unlock()
			b.inFlight.Add(float64(n))
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = b.clock.NewTimer(b.wait)
		}
		select {
		case <-freed:
		case <-timer.C():
			b.refused.Inc()
			return ErrFull
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Release gives n bytes back, waking the reservations waiting for room.
func (b *Bytes) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
	b.inFlight.Sub(float64(n))
}

// InUse returns the bytes reserved now.
func (b *Bytes) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

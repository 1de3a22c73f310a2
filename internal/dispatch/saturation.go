package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// SaturatedAfter is how long a class's queue must go without emptying
// (with a request free to go at its head) for the class to count as
// saturating the upstream rather than bursting. The room a lower class
// leaves for the more urgent classes' bursts (flow.BurstRoom) is of no
// use against a class that never stops sending: that class takes the
// bucket down to its own, smaller, keep and overtakes the lower class's
// head whenever the level rises above it, so the lower class would get
// nothing for as long as it saturates. While normal saturates, low
// keeps what normal keeps, no more, and the scheduler's weights share the
// refill between them (docs/engine.md, "Room for bursts"). The
// interactive classes, critical and high, keep their precedence: a burst
// of theirs longer than SaturatedAfter is still a burst (a replayed
// production trace has bursts minutes long), and aging (a class's
// max_wait) bounds how long the lower classes wait behind it.
const SaturatedAfter = 5 * time.Second

// queued records that class c has a request queued at now: the start of
// its backlog when its queue was empty. d.mu held, after the push.
func (d *Dispatcher) queued(c llm.Priority, now time.Time) {
	if c.Valid() && d.sched.LenClass(c) == 1 {
		d.backlogFrom[c] = now
	}
}

// saturating returns the most urgent class above c, not an interactive
// one, that saturates the upstream at now: its queue has not emptied for
// SaturatedAfter and a request of it is free to go (not held back by its
// client's limit). d.mu held.
func (d *Dispatcher) saturating(c llm.Priority, now time.Time) (llm.Priority, bool) {
	for u := llm.Normal; u < c; u++ {
		if d.sched.LenClass(u) > 0 && now.Sub(d.backlogFrom[u]) >= SaturatedAfter && d.sched.PeekClass(u, now) != nil {
			return u, true
		}
	}
	return 0, false
}

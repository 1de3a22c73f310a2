package flow_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// The classes' weights and max waits in these tests (the defaults).
var (
	testWeights = [llm.NumPriorities]float64{8, 4, 2, 1}
	testMaxWait = [llm.NumPriorities]time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute}
)

func newScheduler(t testing.TB) *flow.Scheduler {
	t.Helper()
	s, err := flow.NewScheduler(testWeights, testMaxWait)
	require.NoError(t, err)
	return s
}

func pop(s *flow.Scheduler, now time.Time) *flow.Item {
	it := s.Peek(now)
	if it != nil {
		s.Take(it)
	}
	return it
}

func TestSchedulerSharesMatchWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sizes func(rnd *rand.Rand) float64
	}{
		{"equal sizes", func(*rand.Rand) float64 { return 1000 }},
		{"mixed sizes", func(rnd *rand.Rand) float64 { return float64(100 + rnd.IntN(5000)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rnd := rand.New(rand.NewPCG(7, 7))
			s := newScheduler(t)
			// Saturation: every class always has a backlog.
			for c := range llm.NumPriorities {
				for range 200 {
					s.Push(&flow.Item{Class: llm.Priority(c), Size: tt.sizes(rnd), Arrival: t0})
				}
			}
			var served [llm.NumPriorities]float64
			var total float64
			for range 20000 {
				it := pop(s, t0)
				served[it.Class] += it.Size
				total += it.Size
				s.Push(&flow.Item{Class: it.Class, Size: tt.sizes(rnd), Arrival: t0})
			}
			for c, w := range testWeights {
				require.InDelta(t, w/15, served[c]/total, 0.01, "class %s", llm.Priority(c))
			}
		})
	}
}

func TestSchedulerLightClassBarelyQueues(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	for range 1000 {
		s.Push(&flow.Item{Class: llm.Low, Size: 1, Arrival: t0})
	}
	// A critical request arriving into a low backlog is served next.
	crit := &flow.Item{Class: llm.Critical, Size: 1, Arrival: t0}
	pop(s, t0)
	s.Push(crit)
	require.Same(t, crit, pop(s, t0))
}

func TestSchedulerRoundRobinBetweenClients(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	for i := range 6 {
		s.Push(&flow.Item{Class: llm.Normal, Client: "greedy", Size: 1, Arrival: t0, Value: i})
	}
	s.Push(&flow.Item{Class: llm.Normal, Client: "a", Size: 1, Arrival: t0})
	s.Push(&flow.Item{Class: llm.Normal, Client: "b", Size: 1, Arrival: t0})
	var order []string
	for s.Len() > 0 {
		order = append(order, pop(s, t0).Client)
	}
	require.Equal(t, []string{"greedy", "a", "b", "greedy", "greedy", "greedy", "greedy", "greedy"}, order)
}

func TestSchedulerPutBackKeepsPlace(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	first := &flow.Item{Class: llm.Normal, Size: 1, Arrival: t0}
	s.Push(first)
	got := pop(s, t0)
	require.Same(t, first, got)
	later := &flow.Item{Class: llm.Normal, Size: 1, Arrival: t0.Add(time.Second)}
	s.Push(later)
	s.PutBack(first) // a retry: ahead of what arrived after it
	require.Same(t, first, s.Peek(t0.Add(time.Second)))
	require.True(t, s.Remove(first))
	require.False(t, s.Remove(first))
	require.Same(t, later, s.Peek(t0))
}

func TestSchedulerAgingBound(t *testing.T) {
	t.Parallel()
	// Random arrivals faster than service; whenever an item is overdue, the
	// served item is overdue too and none is more overdue than it.
	maxWait := [llm.NumPriorities]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	s, err := flow.NewScheduler(testWeights, maxWait)
	require.NoError(t, err)
	rnd := rand.New(rand.NewPCG(3, 4))
	queued := map[*flow.Item]bool{}
	now := t0
	agedServed := 0
	for range 3000 {
		now = now.Add(time.Duration(rnd.IntN(100)) * time.Millisecond)
		for range 2 {
			it := &flow.Item{Class: llm.Priority(rnd.IntN(4)), Client: fmt.Sprint(rnd.IntN(3)), Size: float64(1 + rnd.IntN(10)), Arrival: now}
			s.Push(it)
			queued[it] = true
		}
		due := func(it *flow.Item) time.Time { return it.Arrival.Add(maxWait[it.Class]) }
		var earliest time.Time
		for it := range queued {
			if !now.Before(due(it)) && (earliest.IsZero() || due(it).Before(earliest)) {
				earliest = due(it)
			}
		}
		got := pop(s, now)
		delete(queued, got)
		if !earliest.IsZero() {
			agedServed++
			require.Equal(t, earliest, due(got), "the most overdue item goes first")
		}
	}
	require.Greater(t, agedServed, 100, "the workload must make items overdue")
}

func TestSchedulerBigRequestNotStarved(t *testing.T) {
	t.Parallel()
	// The dispatcher waits for the head to fit. A big request among a
	// stream of small ones of the same class is admitted once its turn
	// comes and the bucket has refilled for it.
	l := newLimiter(t, [flow.NumDims]float64{flow.Tokens: 60000}, 1) // 1000/s, depth 1000
	s := newScheduler(t)
	now := t0
	for i := range 50 {
		s.Push(&flow.Item{Class: llm.Normal, Client: fmt.Sprint(i % 5), Size: 100, Cost: flow.Amount{flow.Tokens: 100}, Arrival: now})
	}
	big := &flow.Item{Class: llm.Normal, Client: "big", Size: 20000, Cost: flow.Amount{flow.Tokens: 20000}, Arrival: now}
	s.Push(big)
	for step := 0; ; step++ {
		require.Less(t, step, 10000)
		// Small requests keep arriving.
		s.Push(&flow.Item{Class: llm.Normal, Client: fmt.Sprint(step % 5), Size: 100, Cost: flow.Amount{flow.Tokens: 100}, Arrival: now})
		head := s.Peek(now)
		w, err := l.Reserve(head.Cost, now)
		require.NoError(t, err)
		if w > 0 {
			now = now.Add(w) // sleep until the head fits; never skip it
			continue
		}
		s.Take(head)
		if head == big {
			break
		}
	}
	require.Less(t, now.Sub(t0), 40*time.Second, "admitted after its round-robin turn and a 20 s refill")
}

func TestSchedulerDemandAndDrain(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	s.Push(&flow.Item{Class: llm.Critical, Cost: flow.Amount{flow.Tokens: 10}, Arrival: t0})
	s.Push(&flow.Item{Class: llm.Normal, Cost: flow.Amount{flow.Tokens: 20}, Arrival: t0})
	s.Push(&flow.Item{Class: llm.Low, Cost: flow.Amount{flow.Tokens: 40}, Arrival: t0})
	require.InDelta(t, 30, s.Demand(llm.Normal)[flow.Tokens], 1e-9)
	require.InDelta(t, 70, s.Demand(llm.Low)[flow.Tokens], 1e-9)
	require.Equal(t, 1, s.LenClass(llm.Low))
	require.Len(t, s.Drain(), 3)
	require.Zero(t, s.Len())
	require.Nil(t, s.Peek(t0))
}

func BenchmarkSchedulerPushPop(b *testing.B) {
	s := newScheduler(b)
	items := make([]*flow.Item, 1024)
	for i := range items {
		items[i] = &flow.Item{Class: llm.Priority(i % 4), Client: fmt.Sprint(i % 16), Size: float64(100 + i), Arrival: t0}
		s.Push(items[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		it := s.Peek(t0)
		s.Take(it)
		s.Push(it)
	}
}

func TestSchedulerPeekClassAndOverdue(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	require.Nil(t, s.PeekClass(llm.Critical, t0))
	require.Nil(t, s.PeekClass(llm.Priority(9), t0))
	normal := &flow.Item{Class: llm.Normal, Client: "a", Size: 10, Arrival: t0}
	crit1 := &flow.Item{Class: llm.Critical, Client: "a", Size: 10, Arrival: t0}
	crit2 := &flow.Item{Class: llm.Critical, Client: "b", Size: 10, Arrival: t0}
	s.Push(normal)
	s.Push(crit1)
	s.Push(crit2)
	require.Same(t, crit1, s.PeekClass(llm.Critical, t0))
	require.Same(t, normal, s.PeekClass(llm.Normal, t0))
	s.Take(crit1)
	require.Same(t, crit2, s.PeekClass(llm.Critical, t0), "round robin moves to the next client")
	require.False(t, s.Overdue(normal, t0.Add(testMaxWait[llm.Normal]-time.Nanosecond)))
	require.True(t, s.Overdue(normal, t0.Add(testMaxWait[llm.Normal])))
}

// TestSchedulerRemoveIf removes exactly the matching items, in every class,
// and leaves the rest served in their usual order.
func TestSchedulerRemoveIf(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	now := time.Unix(0, 0)
	var items []*flow.Item
	for i := range 8 {
		it := &flow.Item{Class: llm.Priority(i % llm.NumPriorities), Client: "c", Size: 1, Arrival: now, Value: i}
		s.Push(it)
		items = append(items, it)
	}
	removed := s.RemoveIf(func(it *flow.Item) bool { return it.Value.(int)%2 == 1 })
	require.Len(t, removed, 4)
	for _, it := range removed {
		require.Equal(t, 1, it.Value.(int)%2)
	}
	require.Equal(t, 4, s.Len())
	for range 4 {
		it := pop(s, now)
		require.NotNil(t, it)
		require.Equal(t, 0, it.Value.(int)%2)
	}
	require.Nil(t, pop(s, now))
	require.False(t, s.Remove(items[1]), "an item RemoveIf took is no longer queued")
}

// TestSchedulerHoldPassesOverAClient: a client held back by its own limit
// keeps its requests' places and counts, while the other clients of its
// class and the other classes are served; the hold ends at its time or on
// Release, and aging never picks a held client.
func TestSchedulerHoldPassesOverAClient(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	a1 := &flow.Item{Class: llm.High, Client: "a", Size: 1, Arrival: t0}
	a2 := &flow.Item{Class: llm.High, Client: "a", Size: 1, Arrival: t0}
	b1 := &flow.Item{Class: llm.High, Client: "b", Size: 1, Arrival: t0.Add(time.Second)}
	low := &flow.Item{Class: llm.Low, Client: "a", Size: 1, Arrival: t0}
	for _, it := range []*flow.Item{a1, a2, b1, low} {
		s.Push(it)
	}
	require.Same(t, a1, s.Peek(t0))
	s.Hold(a1, t0.Add(10*time.Second))
	require.Same(t, b1, s.Peek(t0), "the held client is passed over")
	require.Same(t, b1, s.PeekClass(llm.High, t0))
	require.Equal(t, 3, s.LenClass(llm.High), "held requests still count")
	require.Equal(t, t0.Add(10*time.Second), s.NextRelease(t0))
	s.Take(b1)
	require.Same(t, low, s.Peek(t0), "a hold is per class: the client's low request goes")
	s.Hold(low, time.Time{})
	require.Nil(t, s.Peek(t0), "everything queued is held")
	require.Equal(t, t0.Add(10*time.Second), s.NextRelease(t0), "a hold until Release has no time")
	// Aging: a held client's overdue request is not picked.
	late := t0.Add(time.Hour)
	require.Same(t, a1, s.Peek(late), "a timed hold ends by itself")
	s.Hold(a1, late.Add(time.Minute))
	require.Nil(t, s.Peek(late))
	s.Release("a")
	require.Same(t, a1, s.Peek(late), "Release ends every hold of the client")
	require.True(t, s.NextRelease(late).IsZero())
	s.Take(a1)
	s.Take(s.Peek(late))
	s.Take(s.Peek(late))
	require.Zero(t, s.Len())
}

// TestSchedulerBehindAndTakePast: the requests behind a waiting head are
// offered round by round over its class's clients from the head's,
// passing over held clients, the head left out; one served past the head
// advances the class's tags like any (another class may then have its
// turn), and the head keeps its turn in its class even when it is of the
// head's own client.
func TestSchedulerBehindAndTakePast(t *testing.T) {
	t.Parallel()
	s := newScheduler(t)
	item := func(client string, size float64) *flow.Item {
		it := &flow.Item{Class: llm.Normal, Client: client, Size: size, Cost: flow.Amount{flow.Tokens: size}, Arrival: t0}
		s.Push(it)
		return it
	}
	head := item("a", 9000)
	a2, a3 := item("a", 10), item("a", 11)
	b1, b2 := item("b", 20), item("b", 21)
	c1 := item("c", 30)
	other := &flow.Item{Class: llm.Low, Client: "a", Size: 1, Arrival: t0}
	s.Push(other)
	require.Same(t, head, s.Peek(t0))
	require.Equal(t, []*flow.Item{a2, b1, c1, a3, b2}, s.Behind(head, t0, 10))
	require.Equal(t, []*flow.Item{a2, b1}, s.Behind(head, t0, 2))
	s.Hold(b1, t0.Add(time.Minute))
	require.Equal(t, []*flow.Item{a2, c1, a3}, s.Behind(head, t0, 10), "a held client is passed over")
	s.Release("b")

	s.TakePast(a2, head)
	require.Same(t, head, s.PeekClass(llm.Normal, t0), "its own client's request went past: the head keeps its turn")
	require.Same(t, other, s.Peek(t0), "the class's tags advanced: low's turn")
	s.TakePast(b1, head)
	require.Same(t, head, s.PeekClass(llm.Normal, t0))
	require.Equal(t, []*flow.Item{a3, c1, b2}, s.Behind(head, t0, 10), "b went to the back of the round robin")
	require.Nil(t, s.Behind(other, t0, 10), "nothing behind the only request of its class")
	s.Take(head)
	require.Nil(t, s.Behind(head, t0, 10), "a head no longer queued has nothing behind it")
}

package server

import "sync"

// slotGate is a client's concurrency slots on one upstream: at most cap
// requests in flight, cap being the client's max_concurrency or, on a
// cluster, this node's slots of it (client_share.go). Safe for concurrent
// use.
type slotGate struct {
	mu      sync.Mutex
	max     int // configured max_concurrency
	cap     int // applied: max, or the cluster's grant
	used    int
	waiters int // live requests waiting for a slot
	refused int // job calls refused for want of a slot since the last load
	// changed is closed (and replaced) when a slot frees or the cap
	// grows, waking the requests waiting for one.
	changed chan struct{}
}

func newSlotGate(maxConcurrency int) *slotGate {
	return &slotGate{max: maxConcurrency, cap: maxConcurrency, changed: make(chan struct{})}
}

// tryAcquire takes a slot when one is free; otherwise it returns a
// channel closed when one may be.
func (s *slotGate) tryAcquire() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used < s.cap {
		s.used++
		return nil, true
	}
	return s.changed, false
}

func (s *slotGate) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	s.wake()
}

// wake wakes the waiters; s.mu is held.
func (s *slotGate) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// setCap applies the cluster's slots (< 0: the whole max_concurrency).
// Requests in flight above a lowered cap finish; no new one starts until
// they are below it.
func (s *slotGate) setCap(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 || n > s.max {
		n = s.max
	}
	grew := n > s.cap
	s.cap = n
	if grew {
		s.wake()
	}
}

func (s *slotGate) waiting(d int) {
	s.mu.Lock()
	s.waiters += d
	s.mu.Unlock()
}

func (s *slotGate) refusedOne() {
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
}

// inFlight counts the requests holding a slot (0 on a nil gate).
func (s *slotGate) inFlight() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// load returns the slots held (the cap or those in use, the larger), the
// demand for slots (in use, waiting, and job calls refused since the
// last load) and the configured max.
func (s *slotGate) load() (held int, demand float64, maxConcurrency int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	demand = float64(s.used + s.waiters + s.refused)
	s.refused = 0
	return max(s.cap, s.used), demand, s.max
}

package flow

import (
	"container/list"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// Item is one queued request as the Scheduler sees it.
type Item struct {
	// Class is the priority class.
	Class llm.Priority
	// Client identifies the caller; clients of one class are served round
	// robin.
	Client string
	// Size is the request's weight in fair queueing (e.g. its estimated
	// tokens); values below 1 count as 1.
	Size float64
	// Cost is the request's quota demand, summed by Demand.
	Cost Amount
	// Arrival is when the request first joined the queue; aging counts from
	// it, and an item put back keeps it.
	Arrival time.Time
	// Value is the caller's payload.
	Value any

	seq        uint64
	queued     bool
	client     *clientQueue
	clientElem *list.Element
	classElem  *list.Element
}

type clientQueue struct {
	name     string
	items    *list.List // *Item in seq order
	ringElem *list.Element
	// held is set while the client's own limit keeps its requests back
	// (Hold): until heldUntil, or until Release when that is zero.
	held      bool
	heldUntil time.Time
	demand    Amount // the summed Cost of its items
}

// waits reports whether cl is held back at now.
func (cl *clientQueue) waits(now time.Time) bool {
	return cl.held && (cl.heldUntil.IsZero() || now.Before(cl.heldUntil))
}

type classQueue struct {
	start, finish float64    // SFQ tags
	ring          *list.List // *clientQueue with items, served round robin
	clients       map[string]*clientQueue
	byArrival     *list.List // *Item in seq order, for aging
	demand        Amount
}

// Scheduler orders queued requests. Between classes it is start-time fair
// queueing (SFQ): a class that becomes backlogged gets start tag
// max(V, its last finish tag); the backlogged class with the smallest start
// tag is served; serving an item of size s advances the class's tags by
// s/weight and the virtual time V to the served start tag. Inside a class,
// clients are served round robin, each client's requests in arrival order.
// Aging overrides both: an item that has waited its class's MaxWait is
// served first (the most overdue first).
//
// A client can be held back (Hold) while its own limit has no room: its
// requests keep their places and count in the queue, but Peek passes
// over them, so the other clients, and the other classes, go on.
//
// Peek names the next item without removing it; the caller then Takes it
// when it can be sent. Peek is stable while nothing changes, so the caller
// can wait for that item to fit; Behind names the items of its class the
// caller may serve past it meanwhile (TakePast), within a budget the
// caller keeps.
// PutBack puts a retried item back in its original place. A Scheduler is
// not safe for concurrent use: its owner serialises access.
type Scheduler struct {
	weights [llm.NumPriorities]float64
	maxWait [llm.NumPriorities]time.Duration
	classes [llm.NumPriorities]classQueue
	v       float64
	seq     uint64
	n       int
	held    int // client queues held back (Hold), expired or not
}

// NewScheduler returns an empty Scheduler with each class's weight (> 0)
// and max wait (> 0); the user-facing defaults are upstream.Config's.
func NewScheduler(weights [llm.NumPriorities]float64, maxWait [llm.NumPriorities]time.Duration) (*Scheduler, error) {
	s := &Scheduler{}
	for c := range llm.NumPriorities {
		w, mw := weights[c], maxWait[c]
		if !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("Weights[%s] must be > 0, got %v", llm.Priority(c), w)
		}
		if mw <= 0 {
			return nil, fmt.Errorf("MaxWait[%s] must be > 0, got %v", llm.Priority(c), mw)
		}
		s.weights[c], s.maxWait[c] = w, mw
		s.classes[c] = classQueue{ring: list.New(), clients: map[string]*clientQueue{}, byArrival: list.New()}
	}
	return s, nil
}

// Len returns how many items are queued.
func (s *Scheduler) Len() int { return s.n }

// LenClass returns how many items of class c are queued.
func (s *Scheduler) LenClass(c llm.Priority) int {
	if !c.Valid() {
		return 0
	}
	return s.classes[c].byArrival.Len()
}

// Demand returns the summed Cost of the items queued in class c and every
// more urgent class.
func (s *Scheduler) Demand(c llm.Priority) Amount {
	var a Amount
	for i := llm.Critical; i <= c && i < llm.NumPriorities; i++ {
		a = a.Add(s.classes[i].demand)
	}
	return a
}

// DemandAhead is the summed Cost of what would be served before a new
// request of client in class c: every request of the more urgent classes,
// and, in c, the client's own queued requests plus, from each other
// client, as many as the round robin serves before it (at most one more
// than the client has queued). Clients held back by their own limit
// (Hold, until Release, whether their hold's time has come or not) are
// left out: their requests go at that limit's pace, not ahead of others.
func (s *Scheduler) DemandAhead(c llm.Priority, client string) Amount {
	var a Amount
	if !c.Valid() {
		c = llm.Low
	}
	for i := llm.Critical; i < c; i++ {
		a = a.Add(s.classes[i].demand)
		if s.held > 0 {
			for _, cl := range s.classes[i].clients {
				if cl.held {
					a = a.Sub(cl.demand)
				}
			}
		}
	}
	cq := &s.classes[c]
	own := 0
	if cl := cq.clients[client]; cl != nil {
		own = cl.items.Len()
	}
	for _, cl := range cq.clients {
		if cl.held && cl.name != client {
			continue
		}
		n := cl.items.Len()
		if k := own + 1; cl.name != client && n > k {
			// Only k of its n requests are served before the new one.
			for d, v := range cl.demand {
				a[d] += v * float64(k) / float64(n)
			}
			continue
		}
		a = a.Add(cl.demand)
	}
	return a
}

// ClientDemand returns the summed Cost of client's queued items, every
// class together.
func (s *Scheduler) ClientDemand(client string) Amount {
	var a Amount
	for c := range s.classes {
		if cl := s.classes[c].clients[client]; cl != nil {
			a = a.Add(cl.demand)
		}
	}
	return a
}

// Push queues a new item. An invalid class is queued as Low.
func (s *Scheduler) Push(it *Item) {
	if it.queued {
		return
	}
	s.seq++
	it.seq = s.seq
	s.insert(it)
}

// PutBack puts back an item that was taken (e.g. for a retry), in the place
// its original arrival gives it: ahead of everything that arrived later.
func (s *Scheduler) PutBack(it *Item) {
	if it.queued {
		return
	}
	if it.seq == 0 {
		s.Push(it)
		return
	}
	s.insert(it)
}

func (s *Scheduler) insert(it *Item) {
	if !it.Class.Valid() {
		it.Class = llm.Low
	}
	cq := &s.classes[it.Class]
	if cq.byArrival.Len() == 0 {
		cq.start = math.Max(s.v, cq.finish)
	}
	cl := cq.clients[it.Client]
	if cl == nil {
		cl = &clientQueue{name: it.Client, items: list.New()}
		cq.clients[it.Client] = cl
	}
	if cl.ringElem == nil {
		if it.seq == s.seq {
			cl.ringElem = cq.ring.PushBack(cl)
		} else {
			cl.ringElem = cq.ring.PushFront(cl) // a retry resumes its turn
		}
	}
	it.client = cl
	it.clientElem = insertBySeq(cl.items, it)
	it.classElem = insertBySeq(cq.byArrival, it)
	cq.demand = cq.demand.Add(it.Cost)
	cl.demand = cl.demand.Add(it.Cost)
	it.queued = true
	s.n++
}

// insertBySeq inserts it keeping l in seq order; new items go at the back
// in O(1), ones put back are placed by a scan from the front.
func insertBySeq(l *list.List, it *Item) *list.Element {
	if b := l.Back(); b == nil || b.Value.(*Item).seq < it.seq {
		return l.PushBack(it)
	}
	for e := l.Front(); e != nil; e = e.Next() {
		if e.Value.(*Item).seq > it.seq {
			return l.InsertBefore(it, e)
		}
	}
	return l.PushBack(it)
}

// Peek returns the item to serve next at now, or nil when empty.
func (s *Scheduler) Peek(now time.Time) *Item {
	if s.n == 0 {
		return nil
	}
	var aged *Item
	var agedAt time.Time
	for c := range s.classes {
		it := s.oldestFree(c, now)
		if it == nil {
			continue
		}
		due := it.Arrival.Add(s.maxWait[c])
		if !now.Before(due) && (aged == nil || due.Before(agedAt)) {
			aged, agedAt = it, due
		}
	}
	if aged != nil {
		return aged
	}
	var best *Item
	bestStart := 0.0
	for c := range s.classes {
		cq := &s.classes[c]
		if cq.byArrival.Len() == 0 || best != nil && cq.start >= bestStart {
			continue
		}
		if it := s.PeekClass(llm.Priority(c), now); it != nil {
			best, bestStart = it, cq.start
		}
	}
	return best
}

// oldestFree is class c's longest-waiting item of a client not held back
// at now, or nil: the front of its arrival list, or with clients held,
// the oldest of the free clients' first items (each client's items are
// in arrival order).
func (s *Scheduler) oldestFree(c int, now time.Time) *Item {
	cq := &s.classes[c]
	f := cq.byArrival.Front()
	if f == nil {
		return nil
	}
	if it := f.Value.(*Item); s.held == 0 || !it.client.waits(now) {
		return it
	}
	var oldest *Item
	for e := cq.ring.Front(); e != nil; e = e.Next() {
		cl := e.Value.(*clientQueue)
		if cl.waits(now) {
			continue
		}
		if it := cl.items.Front().Value.(*Item); oldest == nil || it.seq < oldest.seq {
			oldest = it
		}
	}
	return oldest
}

// PeekClass returns the item class c would serve next at now (the oldest
// of its first client in the round robin not held back), or nil when
// there is none.
func (s *Scheduler) PeekClass(c llm.Priority, now time.Time) *Item {
	if !c.Valid() {
		return nil
	}
	for e := s.classes[c].ring.Front(); e != nil; e = e.Next() {
		if cl := e.Value.(*clientQueue); !cl.waits(now) {
			return cl.items.Front().Value.(*Item)
		}
	}
	return nil
}

// Hold holds back it's client in its class: Peek passes over its
// requests until until (zero: until Release), while they keep their
// places. It is for a client's own limit, which has no room for it.
func (s *Scheduler) Hold(it *Item, until time.Time) {
	if !it.queued {
		return
	}
	if !it.client.held {
		s.held++
	}
	it.client.held, it.client.heldUntil = true, until
}

// Held reports whether it's client is held back in its class at now.
func (s *Scheduler) Held(it *Item, now time.Time) bool {
	return it.queued && it.client.waits(now)
}

// Release ends every hold of client, in every class.
func (s *Scheduler) Release(client string) {
	for c := range s.classes {
		if cl := s.classes[c].clients[client]; cl != nil && cl.held {
			cl.held, cl.heldUntil = false, time.Time{}
			s.held--
		}
	}
}

// HeldClient is a client held back in one class (Scheduler.HeldClients).
type HeldClient struct {
	Class  llm.Priority
	Client string
	// Queued is how many of its requests wait in the class; Front is the
	// oldest of them.
	Queued int
	Front  *Item
	// Until is when the hold ends (zero: when Release is called).
	Until time.Time
}

// HeldClients lists the clients held back at now, per class, critical
// first.
func (s *Scheduler) HeldClients(now time.Time) []HeldClient {
	if s.held == 0 {
		return nil
	}
	var out []HeldClient
	for c := range s.classes {
		for e := s.classes[c].ring.Front(); e != nil; e = e.Next() {
			if cl := e.Value.(*clientQueue); cl.waits(now) {
				out = append(out, HeldClient{Class: llm.Priority(c), Client: cl.name, Queued: cl.items.Len(),
					Front: cl.items.Front().Value.(*Item), Until: cl.heldUntil})
			}
		}
	}
	return out
}

// NextRelease returns the earliest instant after now at which a client
// held back until a time is released (zero when none is).
func (s *Scheduler) NextRelease(now time.Time) (next time.Time) {
	if s.held == 0 {
		return time.Time{}
	}
	for c := range s.classes {
		for e := s.classes[c].ring.Front(); e != nil; e = e.Next() {
			cl := e.Value.(*clientQueue)
			if cl.waits(now) && !cl.heldUntil.IsZero() && (next.IsZero() || cl.heldUntil.Before(next)) {
				next = cl.heldUntil
			}
		}
	}
	return next
}

// Overdue reports whether it has waited past its class's max wait (the
// aging bound): such an item must not be overtaken.
func (s *Scheduler) Overdue(it *Item, now time.Time) bool {
	return !now.Before(it.Arrival.Add(s.maxWait[it.Class]))
}

// Take removes it as served: its class's tags and the virtual time advance
// by its size over the class weight, and its client goes to the back of
// the round robin.
func (s *Scheduler) Take(it *Item) { s.take(it, true) }

// TakePast is Take for an item served past head, the head of its class
// waiting for room (Behind): its class's tags advance the same, and its
// client goes to the back of the round robin unless it is head's, which
// keeps its turn.
func (s *Scheduler) TakePast(it, head *Item) {
	s.take(it, !head.queued || it.client != head.client)
}

func (s *Scheduler) take(it *Item, rotate bool) {
	if !it.queued {
		return
	}
	cq := &s.classes[it.Class]
	s.v = math.Max(s.v, cq.start)
	cq.finish = cq.start + math.Max(it.Size, 1)/s.weights[it.Class]
	cl := it.client
	s.unlink(it)
	if cl.ringElem != nil && rotate {
		cq.ring.MoveToBack(cl.ringElem)
	}
	if cq.byArrival.Len() > 0 {
		cq.start = cq.finish
	}
}

// Behind returns up to n items of head's class that may be served past
// head while it waits for room, in the order the class would serve them:
// round by round over its clients in round-robin order from head's
// (passing over those held back at now), each client's items in arrival
// order, head left out.
func (s *Scheduler) Behind(head *Item, now time.Time, n int) []*Item {
	if !head.queued || n <= 0 {
		return nil
	}
	cq := &s.classes[head.Class]
	next := func(e *list.Element) *list.Element {
		if e != nil && e.Value.(*Item) == head {
			e = e.Next()
		}
		return e
	}
	// One cursor per client, at most n of them, from head's.
	var cursors []*list.Element
	e := head.client.ringElem
	for i := 0; e != nil && i < cq.ring.Len() && len(cursors) < n; i++ {
		if cl := e.Value.(*clientQueue); !cl.waits(now) {
			if f := next(cl.items.Front()); f != nil {
				cursors = append(cursors, f)
			}
		}
		if e = e.Next(); e == nil {
			e = cq.ring.Front()
		}
	}
	var out []*Item
	for len(cursors) > 0 && len(out) < n {
		kept := cursors[:0]
		for _, c := range cursors {
			if len(out) == n {
				break
			}
			out = append(out, c.Value.(*Item))
			if c = next(c.Next()); c != nil {
				kept = append(kept, c)
			}
		}
		cursors = kept
	}
	return out
}

// Remove takes it out of the queue without serving it (cancelled, expired,
// shed). It reports whether it was queued.
func (s *Scheduler) Remove(it *Item) bool {
	if !it.queued {
		return false
	}
	s.unlink(it)
	return true
}

func (s *Scheduler) unlink(it *Item) {
	cq := &s.classes[it.Class]
	cl := it.client
	cl.items.Remove(it.clientElem)
	cq.byArrival.Remove(it.classElem)
	cq.demand = cq.demand.Sub(it.Cost)
	cl.demand = cl.demand.Sub(it.Cost)
	if cl.items.Len() == 0 {
		if cl.ringElem != nil {
			cq.ring.Remove(cl.ringElem)
			cl.ringElem = nil
		}
		if cl.held {
			cl.held = false
			s.held--
		}
		delete(cq.clients, cl.name)
	}
	if cq.byArrival.Len() == 0 {
		cq.demand = Amount{}
	}
	it.queued, it.client, it.clientElem, it.classElem = false, nil, nil, nil
	s.n--
}

// RemoveIf removes and returns every queued item for which drop reports
// true, oldest first per class.
func (s *Scheduler) RemoveIf(drop func(*Item) bool) []*Item {
	var out []*Item
	for c := range s.classes {
		for e := s.classes[c].byArrival.Front(); e != nil; {
			next := e.Next()
			if it := e.Value.(*Item); drop(it) {
				s.unlink(it)
				out = append(out, it)
			}
			e = next
		}
	}
	return out
}

// Drain removes and returns every queued item, oldest first per class.
func (s *Scheduler) Drain() []*Item {
	var out []*Item
	for c := range s.classes {
		for e := s.classes[c].byArrival.Front(); e != nil; {
			next := e.Next()
			it := e.Value.(*Item)
			s.unlink(it)
			out = append(out, it)
			e = next
		}
	}
	return out
}

// OldestArrival returns the arrival of class c's longest-waiting item
// (zero when the class is empty): the front of its arrival list, which is
// in sequence order, and an item put back keeps its place and arrival.
func (s *Scheduler) OldestArrival(c llm.Priority) time.Time {
	if !c.Valid() {
		return time.Time{}
	}
	if e := s.classes[c].byArrival.Front(); e != nil {
		return e.Value.(*Item).Arrival
	}
	return time.Time{}
}

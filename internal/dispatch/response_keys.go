package dispatch

import (
	"sync"
	"time"
)

// Bounds of the memory of which key created which response (responseKeys).
const (
	// ResponseKeysTTL is how long a response's key is remembered after its
	// creation: a retrieval, cancel or continuation (previous_response_id)
	// later than that goes to the pool's pass-through key.
	ResponseKeysTTL = 24 * time.Hour
	// ResponseKeysMax bounds the responses remembered per upstream; past
	// it the oldest are forgotten first.
	ResponseKeysMax = 100_000
)

// responseKeys remembers, for an upstream with a pool of keys, which key
// created each OpenAI Response (its id read from the create's answer or
// first stream event), because only that key (project) can retrieve,
// delete, cancel or continue it. It is memory only, per process, bounded
// by ResponseKeysTTL and ResponseKeysMax: entries are kept in creation
// order and the expired or excess ones dropped at each put. Safe for
// concurrent use.
type responseKeys struct {
	mu    sync.Mutex
	byID  map[string]responseKey
	order []responseID // creation order; may hold ids already replaced
	head  int          // order[:head] are dropped
}

type responseKey struct {
	key *poolKey
	at  time.Time
}

type responseID struct {
	id string
	at time.Time
}

// put records that k created response id at now.
func (r *responseKeys) put(id string, k *poolKey, now time.Time) {
	if id == "" || k == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = make(map[string]responseKey)
	}
	r.byID[id] = responseKey{key: k, at: now}
	r.order = append(r.order, responseID{id: id, at: now})
	for r.head < len(r.order) {
		o := r.order[r.head]
		if len(r.byID) <= ResponseKeysMax && now.Sub(o.at) < ResponseKeysTTL {
			break
		}
		if cur, ok := r.byID[o.id]; ok && cur.at.Equal(o.at) {
			delete(r.byID, o.id)
		}
		r.order[r.head] = responseID{}
		r.head++
	}
	if r.head > len(r.order)/2 && r.head > 64 {
		r.order = append(r.order[:0:0], r.order[r.head:]...)
		r.head = 0
	}
}

// get returns the key that created response id, if it is remembered and
// not expired at now.
func (r *responseKeys) get(id string, now time.Time) (*poolKey, bool) {
	if id == "" {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byID[id]
	if !ok || now.Sub(e.at) >= ResponseKeysTTL {
		return nil, false
	}
	return e.key, true
}

// len returns how many responses are remembered.
func (r *responseKeys) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// responseKey returns the key that created response id, or nil when the
// pool has one key, id is empty or its key is not remembered.
func (d *Dispatcher) responseKey(id string, now time.Time) *poolKey {
	if len(d.keys) < 2 || id == "" {
		return nil
	}
	k, _ := d.responses.get(id, now)
	return k
}

// noteResponse records that k created response id (a pool of more than
// one key only).
func (d *Dispatcher) noteResponse(id string, k *poolKey) {
	if len(d.keys) < 2 || id == "" {
		return
	}
	d.responses.put(id, k, d.clk.Now())
}

// ResponseKey returns the secret of the key that created response id
// (read from the create's answer or first stream event), for the
// pass-through of GET, DELETE, cancel and input_items of
// /v1/responses/{id}: only that key can reach it. ok is false when the pool
// has one key or the response is not remembered (created before this
// process started, longer ago than ResponseKeysTTL, or pushed out by
// ResponseKeysMax newer ones): PassKey is the best guess then.
func (d *Dispatcher) ResponseKey(id string) (secret string, ok bool) {
	k := d.responseKey(id, d.clk.Now())
	if k == nil {
		return "", false
	}
	return k.cred.Load().secret, true
}

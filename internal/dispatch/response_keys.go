package dispatch

import (
	"context"
	"sync"
	"time"
)

// ResponseKeysMax bounds the responses remembered in memory per upstream;
// past it the oldest are forgotten first (a store, when there is one,
// still has them).
const ResponseKeysMax = 100_000

// ResponseStoreTimeout bounds one read or write of the ResponseStore: a
// store that does not answer in time leaves the memory alone to answer.
const ResponseStoreTimeout = 2 * time.Second

// ResponseStore keeps which key created each stored Response beyond the
// process: a store shared by the gateway's restarts and by the nodes of a
// cluster (the server adapts the job store to it). Its errors are its own
// to report; the dispatcher then keeps to its memory. Implementations are
// safe for concurrent use.
type ResponseStore interface {
	// PutResponseKey records that the key of fingerprint r.Key created
	// Response r.ID on r.Upstream.
	PutResponseKey(ctx context.Context, r StoredResponseKey) error
	// GetResponseKey returns the record of Response id on upstream that
	// has not expired at now; ok is false when there is none.
	GetResponseKey(ctx context.Context, upstream, id string, now time.Time) (r StoredResponseKey, ok bool, err error)
}

// StoredResponseKey is one record of a ResponseStore.
type StoredResponseKey struct {
	Upstream, ID string
	// Key is the key's Fingerprint, never the key.
	Key       string
	CreatedAt time.Time
	// ExpiresAt is CreatedAt plus the upstream's response_retention.
	ExpiresAt time.Time
}

// responseKeys remembers which key of the upstream created each OpenAI
// Response (its id read from the create's answer or first stream event),
// because only that key (project) can retrieve, delete, cancel or
// continue it, and, for a pool of one key too, that this upstream created
// it (a Response created through a fallback is retrieved there). It is the memory in front of the
// ResponseStore (when there is one), bounded by its ttl (the upstream's
// response_retention) and ResponseKeysMax: entries are kept in creation
// order and the expired or excess ones dropped at each put. Safe for
// concurrent use.
type responseKeys struct {
	ttl   time.Duration
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
		if len(r.byID) <= ResponseKeysMax && now.Sub(o.at) < r.ttl {
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
	if !ok || now.Sub(e.at) >= r.ttl {
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
// pool has one key (it is that key), id is empty or its key is not known
// (created).
func (d *Dispatcher) responseKey(ctx context.Context, id string, now time.Time) *poolKey {
	if len(d.keys) < 2 {
		return nil
	}
	return d.created(ctx, id, now)
}

// created returns the key of the pool that created response id, or nil
// when id is empty or it is not known: not remembered, and not in the
// ResponseStore (read on a miss, then remembered) or by a key no longer
// in the pool.
func (d *Dispatcher) created(ctx context.Context, id string, now time.Time) *poolKey {
	if id == "" {
		return nil
	}
	if k, ok := d.responses.get(id, now); ok {
		return k
	}
	if d.cfg.Responses == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ResponseStoreTimeout)
	defer cancel()
	r, ok, err := d.cfg.Responses.GetResponseKey(ctx, d.cfg.Name, id, now)
	if err != nil || !ok {
		return nil
	}
	for _, k := range d.keys {
		if k.cred.Load().fp == r.Key {
			d.responses.put(id, k, r.CreatedAt)
			return k
		}
	}
	return nil // a key no longer in the pool
}

// noteResponse records that k created response id: in memory, and in
// the ResponseStore before it returns, so the id reaches its caller only
// once every gateway sharing the store can find its key (and upstream).
func (d *Dispatcher) noteResponse(id string, k *poolKey) {
	if id == "" || k == nil {
		return
	}
	now := d.clk.Now()
	d.responses.put(id, k, now)
	if d.cfg.Responses == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ResponseStoreTimeout)
	defer cancel()
	_ = d.cfg.Responses.PutResponseKey(ctx, StoredResponseKey{Upstream: d.cfg.Name, ID: id, Key: k.cred.Load().fp,
		CreatedAt: now, ExpiresAt: now.Add(d.cfg.ResponseRetention)}) // the store reports its own errors
}

// CreatedResponse returns the secret of the key that created response id
// when this upstream is known to have created it (in memory, or in the
// ResponseStore), whatever the pool's size: a retrieval sent to another
// upstream whose fallback this one is can be sent here instead. ok is
// false when it is not known.
func (d *Dispatcher) CreatedResponse(ctx context.Context, id string) (secret string, ok bool) {
	k := d.created(ctx, id, d.clk.Now())
	if k == nil {
		return "", false
	}
	return k.cred.Load().secret, true
}

// ResponseKey returns the secret of the key that created response id
// (read from the create's answer or first stream event), for the
// pass-through of GET, DELETE, cancel and input_items of
// /v1/responses/{id}: only that key can reach it. ok is false when the pool
// has one key or the response's key is not known (created longer ago than
// the upstream's response_retention, before this process started or on
// another gateway without a shared store, or by a key no longer in the
// pool): PassKey is the best guess then.
func (d *Dispatcher) ResponseKey(ctx context.Context, id string) (secret string, ok bool) {
	k := d.responseKey(ctx, id, d.clk.Now())
	if k == nil {
		return "", false
	}
	return k.cred.Load().secret, true
}

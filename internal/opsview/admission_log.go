package opsview

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// The admission log: every wait and refusal of the admission layer
// (internal/admit) with its reason, counted per (kind, reason, client,
// upstream) with the last one's time and message, for /v1/status's
// admission section and the dashboard. Fed by the layer's observer on
// every door (live requests, job submits and calls, batches); O(1) under
// a short lock; bounded by admissionLogMax entries (the least recent
// forgotten first).

// Admission event kinds.
const (
	// AdmissionRefused: a request refused before anything was sent.
	AdmissionRefused = "refused"
	// AdmissionHeld: a job's call held back, to come back later without
	// an attempt.
	AdmissionHeld = "held"
)

// admissionLogMax bounds the entries the log keeps.
const admissionLogMax = 256

// AdmissionEvent is one kind of wait or refusal, for one client on one
// upstream.
type AdmissionEvent struct {
	// Kind is refused or held.
	Kind string `json:"kind"`
	// Reason is a refusal's (budget, access, service_tier) or a hold's
	// (client_limit, fallback_access).
	Reason   string `json:"reason"`
	Client   string `json:"client"`
	Upstream string `json:"upstream"`
	// Count is how many since the gateway started; LastAt and
	// LastMessage are the last one's time and what it said (the refusal's
	// message, the limit that held it).
	Count       int64     `json:"count"`
	LastAt      time.Time `json:"last_at"`
	LastMessage string    `json:"last_message"`
}

type admissionKey struct{ kind, reason, client, upstream string }

type admissionLog struct {
	mu sync.Mutex
	m  map[admissionKey]*AdmissionEvent
}

func newAdmissionLog() *admissionLog { return &admissionLog{m: map[admissionKey]*AdmissionEvent{}} }

func (a *admissionLog) record(kind, reason, client, upstream, message string, now time.Time) {
	k := admissionKey{kind, reason, client, upstream}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[k]
	if !ok {
		if len(a.m) >= admissionLogMax {
			a.forgetOldestLocked()
		}
		e = &AdmissionEvent{Kind: kind, Reason: reason, Client: client, Upstream: upstream}
		a.m[k] = e
	}
	e.Count++
	e.LastAt, e.LastMessage = now.UTC(), message
}

// forgetOldestLocked drops the least recent entry (O(n) at the cap only).
func (a *admissionLog) forgetOldestLocked() {
	var oldest admissionKey
	var at time.Time
	for k, e := range a.m {
		if at.IsZero() || e.LastAt.Before(at) {
			oldest, at = k, e.LastAt
		}
	}
	delete(a.m, oldest)
}

// list returns the entries, the most recent first.
func (a *admissionLog) list() []AdmissionEvent {
	a.mu.Lock()
	out := make([]AdmissionEvent, 0, len(a.m))
	for _, e := range a.m {
		out = append(out, *e)
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y AdmissionEvent) int {
		return cmp.Or(y.LastAt.Compare(x.LastAt), cmp.Compare(x.Client, y.Client), cmp.Compare(x.Upstream, y.Upstream),
			cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Reason, y.Reason))
	})
	return out
}

// Refused implements admit.Observer.
func (m *admitMetrics) Refused(client, upstream, reason, message string) {
	m.log.record(AdmissionRefused, reason, client, upstream, message, m.clock.Now())
}

// Held implements admit.Observer.
func (m *admitMetrics) Held(client, upstream, reason, limit string) {
	m.log.record(AdmissionHeld, reason, client, upstream, limit, m.clock.Now())
}

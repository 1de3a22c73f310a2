package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// AnonymousClient is the client name used, with no clients configured, for
// a request that carries no key at all.
const AnonymousClient = "default"

// client is an authenticated caller.
type client struct {
	name            string
	defaultPriority llm.Priority
	maxPriority     llm.Priority
	// admin may see and manage every client's jobs and batches and call
	// the admin routes. With no clients configured every caller is admin.
	admin bool
}

// caller is the client as the front door knows it.
func (c client) caller() frontdoor.Caller {
	return frontdoor.Caller{Name: c.name, DefaultPriority: c.defaultPriority, MaxPriority: c.maxPriority}
}

// clientSet finds clients by key. Keys are held only as SHA-256 digests
// (a config may give the digest itself, key_sha256), and the lookup
// compares the caller's digest with every one in constant time, so neither
// the answer's timing nor memory reveals a key.
type clientSet struct {
	entries []clientEntry
	// now reads the clock for the entries that expire (runtime clients'
	// expires_at, a rotated key's grace period).
	now func() time.Time
}

type clientEntry struct {
	digest [sha256.Size]byte
	client client
	// notAfter ends the key's validity; zero means never.
	notAfter time.Time
}

// newClientSet holds the config's clients only.
func newClientSet(cfgs []ClientConfig) *clientSet {
	return buildClientSet(cfgs, nil, clock.Real().Now)
}

// buildClientSet holds the config's clients and the runtime clients (the
// admin API's, runtime_clients.go) whose names the config does not use:
// a name in the config is the config's (docs/http-api.md, /v1/clients).
func buildClientSet(cfgs []ClientConfig, runtime []runtimeClient, now func() time.Time) *clientSet {
	cs := &clientSet{now: now}
	names := map[string]bool{}
	for _, c := range cfgs {
		names[c.Name] = true
		// Validated by Config.validate; a parse failure cannot happen here.
		def, _ := llm.ParsePriority(c.DefaultPriority)
		maxP, _ := llm.ParsePriority(c.MaxPriority)
		cl := client{name: c.Name, defaultPriority: def, maxPriority: maxP, admin: c.Role == RoleAdmin}
		for _, d := range c.digests() {
			cs.entries = append(cs.entries, clientEntry{digest: d, client: cl})
		}
	}
	if len(cfgs) == 0 {
		return cs // an open gateway stays open: the admin API needs config clients
	}
	for _, rc := range runtime {
		if names[rc.name] {
			continue
		}
		def, _ := llm.ParsePriority(rc.spec.DefaultPriority) // validated when written
		maxP, _ := llm.ParsePriority(rc.spec.MaxPriority)
		cl := client{name: rc.name, defaultPriority: def, maxPriority: maxP, admin: rc.spec.Role == RoleAdmin}
		for _, k := range rc.keys {
			notAfter := k.ExpiresAt
			if e := rc.spec.ExpiresAt; e != nil && (notAfter.IsZero() || e.Before(notAfter)) {
				notAfter = *e
			}
			var d [sha256.Size]byte
			if _, err := hex.Decode(d[:], []byte(k.SHA256)); err != nil {
				continue // the store checks digests; a bad one matches nothing
			}
			cs.entries = append(cs.entries, clientEntry{digest: d, client: cl, notAfter: notAfter})
		}
	}
	return cs
}

// open reports whether any key is accepted (no clients configured).
func (cs *clientSet) open() bool { return len(cs.entries) == 0 }

// authenticate identifies the caller from x-api-key or Authorization:
// Bearer. With no clients configured every request is accepted, as an
// admin: a request with a key is named "key-" plus the first 8 hex digits
// of the key's SHA-256 (so fairness still tells callers apart without
// logging keys), one without is AnonymousClient. Otherwise the key must
// belong to a client.
func (cs *clientSet) authenticate(h http.Header) (client, bool) {
	key := clientKey(h)
	if cs.open() {
		if key == "" {
			return client{name: AnonymousClient, defaultPriority: DefaultPriorityDefault, maxPriority: MaxPriorityDefault, admin: true}, true
		}
		d := sha256.Sum256([]byte(key))
		return client{name: "key-" + hex.EncodeToString(d[:4]), defaultPriority: DefaultPriorityDefault, maxPriority: MaxPriorityDefault, admin: true}, true
	}
	if key == "" {
		return client{}, false
	}
	d := sha256.Sum256([]byte(key))
	var found client
	var notAfter time.Time
	ok := 0
	for _, e := range cs.entries { // every entry, no early exit
		if m := subtle.ConstantTimeCompare(d[:], e.digest[:]); m == 1 {
			found, notAfter, ok = e.client, e.notAfter, 1
		}
	}
	if ok == 1 && !notAfter.IsZero() && !cs.now().Before(notAfter) {
		return client{}, false // expired, or past its grace period
	}
	return found, ok == 1
}

// clientKey returns the key the client sent, x-api-key first.
func clientKey(h http.Header) string {
	if k := strings.TrimSpace(h.Get("X-Api-Key")); k != "" {
		return k
	}
	auth := strings.TrimSpace(h.Get("Authorization"))
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// requireAdmin lets only admin callers through to next: 401 without a
// valid key, 403 (permission_error) for a client that is not an admin.
// With no clients configured every caller is an admin.
func (s *Server) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cl, ok := s.clientSet().authenticate(r.Header)
		if !ok {
			writeJobsError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing Sluice client key")
			return
		}
		if !cl.admin {
			writeJobsError(w, http.StatusForbidden, "permission_error",
				"this route needs an admin client key (role: admin); client "+cl.name+" is not an admin")
			return
		}
		next(w, r)
	}
}

// clientSet returns the clients in force (a reload swaps them).
func (s *Server) clientSet() *clientSet { return s.clients.Load() }

// callerOf returns the client a jobs request was authenticated as.
func callerOf(r *http.Request) (client, bool) {
	cl, ok := r.Context().Value(jobClientKey{}).(client)
	return cl, ok
}

func sha256Sum(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }

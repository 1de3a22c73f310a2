package clients

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// Anonymous is the client name used, with no clients configured, for a
// request that carries no key at all.
const Anonymous = "default"

// Client is an authenticated caller.
type Client struct {
	Name            string
	DefaultPriority llm.Priority
	MaxPriority     llm.Priority
	// Admin may see and manage every client's jobs and batches and call
	// the admin routes. With no clients configured every caller is admin.
	Admin bool
}

// Caller is the client as the front door knows it.
func (c Client) Caller() frontdoor.Caller {
	return frontdoor.Caller{Name: c.Name, DefaultPriority: c.DefaultPriority, MaxPriority: c.MaxPriority}
}

// Set finds clients by key. Keys are held only as SHA-256 digests (a
// config may give the digest itself, key_sha256), and the lookup compares
// the caller's digest with every one in constant time, so neither the
// answer's timing nor memory reveals a key. A Set is never changed once
// built: the Registry builds a new one for every change.
type Set struct {
	entries []setEntry
	// now reads the clock for the entries that expire (runtime clients'
	// expires_at, a rotated key's grace period).
	now func() time.Time
}

type setEntry struct {
	digest [sha256.Size]byte
	client Client
	// notAfter ends the key's validity; zero means never.
	notAfter time.Time
}

// NewSet holds the config's clients cfgs (defaulted and validated) and
// the runtime clients whose names the config does not use: a name in the
// config is the config's. Without config clients the set is open and
// holds no runtime client (the admin API needs config clients).
func NewSet(cfgs []Config, runtime []Runtime, now func() time.Time) *Set {
	cs := &Set{now: now}
	names := map[string]bool{}
	for _, c := range cfgs {
		names[c.Name] = true
		// Validated by Validate; a parse failure cannot happen here.
		def, _ := llm.ParsePriority(c.DefaultPriority)
		maxP, _ := llm.ParsePriority(c.MaxPriority)
		cl := Client{Name: c.Name, DefaultPriority: def, MaxPriority: maxP, Admin: c.Role == RoleAdmin}
		for _, d := range c.digests() {
			cs.entries = append(cs.entries, setEntry{digest: d, client: cl})
		}
	}
	if len(cfgs) == 0 {
		return cs // an open gateway stays open: the admin API needs config clients
	}
	for _, rc := range runtime {
		if names[rc.Name] {
			continue
		}
		def, _ := llm.ParsePriority(rc.Spec.DefaultPriority) // validated when written
		maxP, _ := llm.ParsePriority(rc.Spec.MaxPriority)
		cl := Client{Name: rc.Name, DefaultPriority: def, MaxPriority: maxP, Admin: rc.Spec.Role == RoleAdmin}
		for _, k := range rc.Keys {
			notAfter := k.ExpiresAt
			if e := rc.Spec.ExpiresAt; e != nil && (notAfter.IsZero() || e.Before(notAfter)) {
				notAfter = *e
			}
			var d [sha256.Size]byte
			if _, err := hex.Decode(d[:], []byte(k.SHA256)); err != nil {
				continue // the store checks digests; a bad one matches nothing
			}
			cs.entries = append(cs.entries, setEntry{digest: d, client: cl, notAfter: notAfter})
		}
	}
	return cs
}

// Open reports whether any key is accepted (no clients configured).
func (cs *Set) Open() bool { return len(cs.entries) == 0 }

// Authenticate identifies the caller that sent key ("" for none). With no
// clients configured every caller is accepted, as an admin: one with a key
// is named "key-" plus the first 8 hex digits of the key's SHA-256 (so
// fairness still tells callers apart without logging keys), one without
// is Anonymous. Otherwise the key must belong to a client, and be within
// its validity.
func (cs *Set) Authenticate(key string) (Client, bool) {
	if cs.Open() {
		if key == "" {
			return Client{Name: Anonymous, DefaultPriority: DefaultPriorityDefault, MaxPriority: MaxPriorityDefault, Admin: true}, true
		}
		d := sha256.Sum256([]byte(key))
		return Client{Name: "key-" + hex.EncodeToString(d[:4]), DefaultPriority: DefaultPriorityDefault, MaxPriority: MaxPriorityDefault, Admin: true}, true
	}
	if key == "" {
		return Client{}, false
	}
	d := sha256.Sum256([]byte(key))
	var found Client
	var notAfter time.Time
	ok := 0
	for _, e := range cs.entries { // every entry, no early exit
		if m := subtle.ConstantTimeCompare(d[:], e.digest[:]); m == 1 {
			found, notAfter, ok = e.client, e.notAfter, 1
		}
	}
	if ok == 1 && !notAfter.IsZero() && !cs.now().Before(notAfter) {
		return Client{}, false // expired, or past its grace period
	}
	return found, ok == 1
}

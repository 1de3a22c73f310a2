package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

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
}

// caller is the client as the front door knows it.
func (c client) caller() frontdoor.Caller {
	return frontdoor.Caller{Name: c.name, DefaultPriority: c.defaultPriority, MaxPriority: c.maxPriority}
}

// clientSet finds clients by key. Keys are held only as SHA-256 digests, so
// the lookup takes the same time whatever the key shares with a real one.
type clientSet struct {
	byDigest map[[sha256.Size]byte]client
}

func newClientSet(cfgs []ClientConfig) *clientSet {
	cs := &clientSet{byDigest: map[[sha256.Size]byte]client{}}
	for _, c := range cfgs {
		// Validated by Config.validate; a parse failure cannot happen here.
		def, _ := llm.ParsePriority(c.DefaultPriority)
		maxP, _ := llm.ParsePriority(c.MaxPriority)
		cs.byDigest[sha256.Sum256([]byte(c.Key))] = client{name: c.Name, defaultPriority: def, maxPriority: maxP}
	}
	return cs
}

// open reports whether any key is accepted (no clients configured).
func (cs *clientSet) open() bool { return len(cs.byDigest) == 0 }

// authenticate identifies the caller from x-api-key or Authorization:
// Bearer. With no clients configured every request is accepted: a request
// with a key is named "key-" plus the first 8 hex digits of the key's
// SHA-256 (so fairness still tells callers apart without logging keys), one
// without is AnonymousClient. Otherwise the key must belong to a client.
func (cs *clientSet) authenticate(h http.Header) (client, bool) {
	key := clientKey(h)
	if cs.open() {
		if key == "" {
			return client{name: AnonymousClient, defaultPriority: DefaultPriorityDefault, maxPriority: MaxPriorityDefault}, true
		}
		d := sha256.Sum256([]byte(key))
		return client{name: "key-" + hex.EncodeToString(d[:4]), defaultPriority: DefaultPriorityDefault, maxPriority: MaxPriorityDefault}, true
	}
	if key == "" {
		return client{}, false
	}
	c, ok := cs.byDigest[sha256.Sum256([]byte(key))]
	return c, ok
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

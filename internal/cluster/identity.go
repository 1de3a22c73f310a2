package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrDuplicateNode means another live process syncs under this node id: the
// lease of (key, node) was last written by another incarnation, is live, and
// was renewed after this incarnation's own previous write (a dead
// predecessor cannot have done that). A Sync that meets it writes nothing
// and answers a *DuplicateError.
var ErrDuplicateNode = errors.New("cluster: node id in use by another process")

// DuplicateError is the ErrDuplicateNode a Sync answers, naming the other
// process.
type DuplicateError struct {
	Key  string
	Node string
	// Incarnation is the other process's (Incarnation.String); empty when
	// its lease was written by a version without incarnations.
	Incarnation string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("cluster: node id %q is in use by another process (incarnation %q) on %s", e.Node, e.Incarnation, e.Key)
}

func (e *DuplicateError) Unwrap() error { return ErrDuplicateNode }

// Incarnation names one run of a process: a random token and when it
// started. Two processes under one node id have different incarnations,
// and Older orders them the same way in both.
type Incarnation struct {
	Token   string // 8 hex digits from crypto/rand
	Started time.Time
}

// NewIncarnation returns a fresh incarnation started at now.
func NewIncarnation(now time.Time) Incarnation {
	return Incarnation{Token: randomHex(4), Started: now.UTC()}
}

// String is "token@start" (RFC 3339, UTC): what the stores keep with a
// lease. It has no spaces.
func (i Incarnation) String() string {
	return i.Token + "@" + i.Started.UTC().Format(time.RFC3339Nano)
}

// ErrBadIncarnation means a string is not an Incarnation.String.
var ErrBadIncarnation = errors.New("cluster: malformed incarnation")

// ParseIncarnation parses Incarnation.String.
func ParseIncarnation(s string) (Incarnation, error) {
	tok, at, ok := strings.Cut(s, "@")
	if !ok || tok == "" {
		return Incarnation{}, fmt.Errorf("%w: %q", ErrBadIncarnation, s)
	}
	started, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return Incarnation{}, fmt.Errorf("%w: %q: %w", ErrBadIncarnation, s, err)
	}
	return Incarnation{Token: tok, Started: started}, nil
}

// Older reports whether i started before o (at the same instant, the
// smaller token is the older).
func (i Incarnation) Older(o Incarnation) bool {
	if !i.Started.Equal(o.Started) {
		return i.Started.Before(o.Started)
	}
	return i.Token < o.Token
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// defaultNodeID is Config.NodeID's default, made once per process: the
// pid tells apart the processes of one host, the random suffix the
// containers that share a hostname and a pid (1).
var defaultNodeID = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", cmp.Or(h, "sluice"), os.Getpid(), randomHex(3))
})

// asideNode names the lease a takeover keeps aside: node's lease as
// incarnation wrote it, counted by every node until it expires. The
// Postgres SQL and the Redis script build the same name.
func asideNode(node, incarnation string) string { return node + "~" + incarnation }

// ownFormer lists the leases a Sync drops when r's incarnation wrote
// them: its own lease kept aside from r.Node (it takes it back), and
// with r.From its lease under its former id and the one kept aside from
// that ("" entries match nothing).
func ownFormer(r Report) [3]string {
	out := [3]string{asideNode(r.Node, r.Incarnation)}
	if r.From != "" && r.From != r.Node {
		out[1], out[2] = r.From, asideNode(r.From, r.Incarnation)
	}
	return out
}

// Identity is a process's name in the shared state: the node id it syncs
// under and its incarnation. A Node makes one; its Tenants share it, so
// that both sync, lead and rename as one process.
//
// Duplicates. A Sync reports this incarnation's previous write of the key
// (Report.Renew): without one, an unexpired lease of another incarnation under
// the same id is taken over and set aside (it may be a restarted node's
// dead predecessor, or a live duplicate: either way its share stays held
// until it expires); with one, it is a live duplicate (ErrDuplicateNode).
// Of the two processes, the older keeps the id: when it meets the
// duplicate it takes its lease back at once, and the younger, meeting the
// older's lease at its next sync, takes a fresh id (the configured one
// plus "-" and 6 random hex digits), says so once at warn, and syncs on
// under it. So exactly one renames, and every share applied stays held
// by an unexpired lease throughout.
type Identity struct {
	configured string
	inc        Incarnation
	incStr     string
	log        *slog.Logger

	mu        sync.Mutex
	id        string
	gen       int    // bumped at each rename
	rival     string // the incarnation whose id this one left ("": none)
	kept      string // the last younger incarnation this one kept its id against (logged once)
	renamedAt time.Time
}

// NewIdentity returns the identity of a process starting now under
// nodeID (Config.NodeID once defaulted).
func NewIdentity(nodeID string, now time.Time, log *slog.Logger) *Identity {
	inc := NewIncarnation(now)
	return &Identity{configured: nodeID, id: nodeID, gen: 1, inc: inc, incStr: inc.String(), log: cmp.Or(log, slog.Default())}
}

// ID returns the node id in use: the configured one, or the fresh one
// taken after meeting a duplicate.
func (i *Identity) ID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id
}

// Configured returns the configured node id.
func (i *Identity) Configured() string { return i.configured }

// Incarnation returns this process's incarnation.
func (i *Identity) Incarnation() Incarnation { return i.inc }

// Rival returns the incarnation of the other process that made this one
// leave its configured id, and when ("" and zero: none).
func (i *Identity) Rival() (string, time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.rival, i.renamedAt
}

func (i *Identity) current() (string, int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id, i.gen
}

// written is what a syncer keeps per key of its own lease: the identity
// generation and id it last wrote it under (gen 0: not written since it
// started or left).
type written struct {
	gen  int
	node string
}

// sync sends r under the identity (its Node, Incarnation, Renew and From
// are set here) and resolves a duplicate as Identity's comment says: the
// older takes the lease back, the younger renames, each with a second
// Sync in the same call. The first write under a fresh id moves the
// lease from the former one (Report.From) in the same step. w is the
// key's written, updated on success.
func (i *Identity) sync(ctx context.Context, b Backend, r Report, w *written, now time.Time) (Grant, error) {
	node, gen := i.current()
	r.Node, r.Incarnation, r.Renew = node, i.incStr, w.gen == gen
	if w.gen != 0 && w.node != node {
		r.From = w.node
	}
	g, err := b.Sync(ctx, r)
	if dup, ok := errors.AsType[*DuplicateError](err); ok {
		if i.keeps(dup) {
			r.Renew = false // take it back: the younger meets it at its next sync
		} else {
			node, gen = i.rename(gen, dup, now)
			r.Node, r.Renew, r.From = node, false, dup.Node
		}
		g, err = b.Sync(ctx, r)
	}
	if err != nil {
		return Grant{}, err
	}
	*w = written{gen: gen, node: node}
	return g, nil
}

// keeps reports whether this incarnation is the older of the two, and
// logs it once per rival. An unreadable rival (a version without
// incarnations) is taken as the older.
func (i *Identity) keeps(dup *DuplicateError) bool {
	other, err := ParseIncarnation(dup.Incarnation)
	if err != nil || !i.inc.Older(other) {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.kept != dup.Incarnation {
		i.kept = dup.Incarnation
		i.log.Info("cluster node id in use by another process: this one is older and keeps it, the other takes a fresh id",
			"node_id", i.id, "incarnation", i.incStr, "other_incarnation", dup.Incarnation, "key", dup.Key)
	}
	return true
}

// rename takes a fresh id unless one was taken since generation gen (by
// another key meeting the same duplicate), and returns the id in use.
func (i *Identity) rename(gen int, dup *DuplicateError, now time.Time) (string, int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gen == gen {
		old := i.id
		i.id, i.gen = i.configured+"-"+randomHex(3), i.gen+1
		i.rival, i.renamedAt = dup.Incarnation, now
		i.log.Warn("cluster node id in use by another process: this node takes a fresh id",
			"node_id", old, "new_node_id", i.id, "incarnation", i.incStr, "other_incarnation", dup.Incarnation, "key", dup.Key)
	}
	return i.id, i.gen
}

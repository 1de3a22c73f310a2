package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/internal/flow"
)

// Backend is the shared state behind a cluster. Every method is one atomic
// step on the store (a transaction, a Lua script): no read-here,
// write-there split.
type Backend interface {
	// Sync renews node's lease on key, reports its demand and the share it
	// has applied, drops every expired lease of key, and grants the node a
	// new share (Allocate) out of what the others do not hold. It also
	// publishes r.PausedUntil (the latest pause wins) and returns the
	// key's current pause and every unexpired lease.
	//
	// A lease is written by one incarnation (Report.Incarnation). When
	// the unexpired lease of (key, node) is another incarnation's, a Sync
	// without Renew takes it over: that lease is kept aside, under
	// asideNode(node, its incarnation), until it expires, and counts as
	// another node's; a Sync with Renew writes nothing and answers a
	// *DuplicateError (ErrDuplicateNode) naming that incarnation. The
	// reporting incarnation's own leases kept aside from node, and its
	// leases under r.From, are dropped (they were held until now, which
	// the burst pool's decay counts).
	Sync(ctx context.Context, r Report) (Grant, error)
	// Leave drops node's lease on key, and the lease kept aside from it,
	// when incarnation wrote them (a clean shutdown gives its share back
	// at once rather than after its TTL; another process's lease under
	// the same id is left alone).
	Leave(ctx context.Context, key, node, incarnation string) error
	// Lead takes or renews the lease on the leadership named name for ttl
	// and reports whether the caller holds it. The holder is an
	// incarnation: it renews, under whatever node id; another incarnation
	// (another process under the same id included) takes it only once it
	// has expired.
	Lead(ctx context.Context, name, node, incarnation string, ttl time.Duration) (bool, error)
	// Close releases the backend's connections.
	Close() error
}

// Listener is implemented by a Backend that can announce a published
// pause or breaker opening at once (PostgreSQL LISTEN/NOTIFY, Redis
// pub/sub): Listen calls changed with the
// key until ctx ends, and the node syncs that key without waiting for its
// interval.
type Listener interface {
	Listen(ctx context.Context, changed func(key string))
}

// ErrBadReport means a Report's fields are out of range.
var ErrBadReport = errors.New("cluster: invalid report")

// Report is one node's sync for one key.
type Report struct {
	// Key names the shared quota: the upstream's name and its API key's
	// fingerprint (Key).
	Key string
	// Node is the reporting node's id.
	Node string
	// Incarnation is the reporting process's (Incarnation.String): it is
	// kept with the lease, so two processes under one id are told apart.
	Incarnation string
	// Renew says this incarnation wrote its lease on Key under Node at an
	// earlier sync (and has not left it since): an unexpired lease of another
	// incarnation there now is a duplicate process (ErrDuplicateNode).
	// Without it such a lease is taken over (a restarted node's
	// predecessor).
	Renew bool
	// From is the node id this incarnation wrote its lease on Key under
	// before it took a fresh one ("": none): that lease, and the one
	// kept aside from it, are this incarnation's no more once this sync
	// writes the lease under Node, which holds what it applies now. A
	// lease of another incarnation under From is left alone.
	From string
	// Demand is the node's class-weighted demand on the quota (Demand).
	Demand float64
	// Share is the share of the quota the node applies now, in [0, 1].
	Share float64
	// SlotDemand is the node's class-weighted demand for concurrency slots.
	SlotDemand float64
	// Slots is how many slots the node holds now: its cap, or more while
	// requests admitted under an older, larger cap are still in flight.
	Slots int
	// MaxSlots is the cluster-wide max_concurrency.
	MaxSlots int
	// PausedUntil is the node's own pause to publish (zero: none).
	PausedUntil time.Time
	// TTL is how long the lease lives without a renewal (and a probe
	// token without a renewal).
	TTL time.Duration
	// BreakerOpenUntil is the node's own breaker opening to publish: the
	// end of its open period (zero: none). The latest opening wins, and a
	// new one takes the probe token back (the probe failed).
	BreakerOpenUntil time.Time
	// WantProbe says the node's breaker has served its open period and
	// it has work to probe with: it is granted the key's one probe token
	// when the shared opening has ended and no other unexpired node holds the
	// token. A holder that reports false gives the token back.
	WantProbe bool
	// BreakerClosed says the node's probes succeeded and its breaker
	// closed: when it holds the probe token, the shared opening is
	// cleared for every node.
	BreakerClosed bool
	// Learned are the provider's reports this node received since it
	// last published them (learned.go): the store keeps the latest per
	// account and dimension.
	Learned []flow.ClusterReport

	// The burst pool (burstPool), in fractions of the whole burst depth.

	// Starting says the node has not been granted anything since it
	// started: its buckets are empty, and when no lease of the key is
	// unexpired the pool starts full.
	Starting bool
	// Backlog is the node's queued cost as a fraction of the burst (its
	// largest dimension): the most it is credited.
	Backlog float64
	// Level is the node's bucket fill as a fraction of the burst (its
	// emptiest dimension): it is credited at most its new share less
	// this, what its own depth can take.
	Level float64
	// BurstSeconds is how long the whole rate takes to refill the whole
	// burst depth: the pool decays at the held shares' sum over it per
	// second. 0 when no dimension is limited (nothing is credited).
	BurstSeconds float64
	// Returned is the fraction of the burst the node dropped lowering its
	// share since its previous sync (flow.ClusterShare.SetShare): it goes back
	// to the pool.
	Returned float64
}

func (r Report) validate() error {
	switch {
	case r.Key == "" || r.Node == "" || r.Incarnation == "":
		return errors.Join(ErrBadReport, errors.New("key, node and incarnation are required"))
	case strings.ContainsFunc(r.Incarnation, unicode.IsSpace):
		return errors.Join(ErrBadReport, errors.New("incarnation must have no spaces"))
	case !(r.Share >= 0 && r.Share <= 1) || !(r.Demand >= 0) || !(r.SlotDemand >= 0):
		return errors.Join(ErrBadReport, errors.New("share must be in [0, 1], demands >= 0"))
	case r.Slots < 0 || r.MaxSlots < 0 || r.TTL <= 0:
		return errors.Join(ErrBadReport, errors.New("slots must be >= 0 and ttl > 0"))
	case !(r.Backlog >= 0) || !(r.Level >= 0 && r.Level <= 1) || !(r.BurstSeconds >= 0) || !(r.Returned >= 0 && r.Returned <= 1):
		return errors.Join(ErrBadReport, errors.New("backlog and burst seconds must be >= 0, level and returned in [0, 1]"))
	}
	return validateLearned(r.Learned)
}

// Grant is a Sync's answer.
type Grant struct {
	// Share is the share the node may apply now. When it is below the
	// Report's, the node lowers first and the lease keeps the old share
	// until the next Sync reports the lower one: the capacity is released
	// only once it is no longer used.
	Share float64
	// Slots is the node's concurrency slots.
	Slots int
	// PausedUntil is the key's pause, from any node (zero: none).
	PausedUntil time.Time
	// Leases are the key's unexpired leases after this sync, this node's
	// included.
	Leases []Lease
	// BreakerOpenUntil is the key's shared breaker opening (zero: closed
	// cluster-wide). Once it has passed, only the probe token's holder
	// may probe.
	BreakerOpenUntil time.Time
	// Probe says this node holds the key's probe token.
	Probe bool
	// Learned are the key's latest provider reports, per account and
	// dimension, from any node (learned.go), ordered by account and
	// dimension.
	Learned []flow.ClusterReport
	// Credit is the fraction of the burst granted to the node out of the
	// key's burst pool, to add to its buckets (flow.ClusterShare.Credit).
	Credit float64
	// Pool is what is left in the burst pool after this sync.
	Pool float64
}

// Lease is one node's lease on a key, as stored.
type Lease struct {
	Node string
	// Incarnation wrote it ("": a version without incarnations).
	Incarnation string
	Share       float64
	Demand      float64
	Slots       int
	SlotDemand  float64
	ExpiresAt   time.Time
}

// Fingerprint is the first 16 hex digits of the SHA-256 of an API key:
// enough to tell two keys apart in shared state, never the key.
func Fingerprint(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:8])
}

// Key is the shared-state key of an upstream's quota: its name and the
// fingerprint of its API key, so two upstreams with the same key under
// different names do not share, and a key rotation starts a fresh quota.
func Key(upstream, apiKey string) string {
	return upstream + "/" + Fingerprint(apiKey)
}

// signals are a key's shared signals as stored: the pause, the breaker's
// opening and its probe token (zero times: none).
type signals struct {
	PausedUntil  time.Time
	OpenUntil    time.Time
	ProbeNode    string
	ProbeExpires time.Time
	Pool         burstPool
}

// step applies a Report to s at now (the store's clock) and reports
// whether the other nodes should hear of it at once. The Redis script
// does the same in Lua.
//
//   - A pause: the latest wins.
//   - A breaker opening: the latest wins, and the probe token is taken
//     back (the probe, if any, failed).
//   - A close from the probe token's holder clears the opening.
//   - A node that wants to probe once the opening has passed gets the
//     token when nobody else holds an unexpired one; the holder renews it by
//     asking again and gives it back by not asking (it has no work to
//     probe with), and a holder that dies loses it after TTL.
func (s signals) step(r Report, now time.Time) (signals, bool) {
	announce := false
	if !r.PausedUntil.IsZero() {
		announce = true
		if r.PausedUntil.After(s.PausedUntil) {
			s.PausedUntil = r.PausedUntil
		}
	}
	if !r.BreakerOpenUntil.IsZero() {
		announce = true
		if r.BreakerOpenUntil.After(s.OpenUntil) {
			s.OpenUntil = r.BreakerOpenUntil
		}
		s.ProbeNode, s.ProbeExpires = "", time.Time{}
	}
	if r.BreakerClosed && !s.OpenUntil.IsZero() && s.ProbeNode == r.Node && !s.ProbeExpires.Before(now) {
		s.OpenUntil, s.ProbeNode, s.ProbeExpires = time.Time{}, "", time.Time{}
		announce = true
	}
	if s.ProbeNode == r.Node && !r.WantProbe {
		// The holder has nothing to probe with: another node may.
		s.ProbeNode, s.ProbeExpires = "", time.Time{}
	}
	if s.ProbeExpires.Before(now) {
		s.ProbeNode, s.ProbeExpires = "", time.Time{}
	}
	if !s.OpenUntil.IsZero() && !s.OpenUntil.After(now) && r.WantProbe && (s.ProbeNode == "" || s.ProbeNode == r.Node) {
		s.ProbeNode, s.ProbeExpires = r.Node, now.Add(r.TTL)
	}
	return s, announce
}

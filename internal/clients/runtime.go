package clients

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// KeyPrefix starts every key the admin API issues, so a leaked key is
// recognisable (secret scanners) and told apart from provider keys.
const KeyPrefix = "sk-sluice-"

// KeyShown is how many characters of a key are kept for display (the
// prefix and 4 random characters): not enough to use it.
const KeyShown = len(KeyPrefix) + 4

// Spec is a runtime client's settings, as the store keeps them and the
// admin API shows them.
type Spec struct {
	// Role is client or admin. Defaults to client.
	Role string `json:"role"`
	// DefaultPriority and MaxPriority bound the client's classes.
	// Default to normal and critical.
	DefaultPriority string `json:"default_priority"`
	MaxPriority     string `json:"max_priority"`
	// Limits and Budget are the config's limits and budget.
	Limits admit.ClientLimits `json:"limits"`
	Budget admit.Budget       `json:"budget"`
	// ExpiresAt ends every key of the client; nil means never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Access is what it may use: allowed_upstreams, allowed_models.
	admit.Access
}

// WithDefaults fills the spec's unset fields as the config's clients'.
func (sp Spec) WithDefaults() Spec {
	cc := Config{Role: sp.Role, DefaultPriority: sp.DefaultPriority, MaxPriority: sp.MaxPriority}.WithDefaults()
	sp.Role, sp.DefaultPriority, sp.MaxPriority = cc.Role, cc.DefaultPriority, cc.MaxPriority
	return sp
}

// Validate checks sp, the spec of the client name, by the config's own
// rules against the upstreams its limits may name; its errors name the
// field (role, limits.requests_per_minute, budget.day, ...).
func (sp Spec) Validate(name string, upstreams map[string]bool) error {
	cc := Config{Name: name, KeySHA256: hex.EncodeToString(make([]byte, sha256.Size)), Role: sp.Role,
		DefaultPriority: sp.DefaultPriority, MaxPriority: sp.MaxPriority, Limits: sp.Limits, Budget: sp.Budget}
	if err := cc.validate(); err != nil {
		return err
	}
	if err := sp.Limits.Validate(upstreams); err != nil {
		return fmt.Errorf("limits.%w", err)
	}
	return sp.Access.Validate(upstreams)
}

// Runtime is a runtime client as the gateway applies it: a client created
// through the admin API and kept in the job store.
type Runtime struct {
	Name    string
	Spec    Spec
	Keys    []jobstore.ClientKey
	Version int64
	Created time.Time
	Updated time.Time
}

// Decode reads a runtime client as the store keeps it, its spec defaulted.
func Decode(sc *jobstore.StoredClient) (Runtime, error) {
	var spec Spec
	if err := json.Unmarshal(sc.Spec, &spec); err != nil {
		return Runtime{}, fmt.Errorf("decoding client %q: %w", sc.Name, err)
	}
	return Runtime{Name: sc.Name, Spec: spec.WithDefaults(), Keys: sc.Keys, Version: sc.Version,
		Created: sc.CreatedAt, Updated: sc.UpdatedAt}, nil
}

// NewKey returns a new key (KeyPrefix and 256 random bits)
// and its stored form.
func NewKey(now time.Time) (string, jobstore.ClientKey, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", jobstore.ClientKey{}, fmt.Errorf("generating a key: %w", err)
	}
	key := KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	d := sha256.Sum256([]byte(key))
	return key, jobstore.ClientKey{SHA256: hex.EncodeToString(d[:]), Prefix: key[:KeyShown], CreatedAt: now}, nil
}

// Reader is what the runtime clients need of the job store.
type Reader interface {
	ListClients(ctx context.Context) ([]*jobstore.StoredClient, error)
	ClientsVersion(ctx context.Context) (int64, error)
}

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Store is the job store the runtime clients are kept in. Required.
	Store Reader
	// Interval is how often the store's clients version is read (the
	// gateway's clients_poll). Required.
	Interval time.Duration
	// Apply puts the runtime clients read in force
	// (Registry.SetRuntime). Required.
	Apply func([]Runtime)
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// Logger logs the polls that fail. Defaults to slog.Default().
	Logger *slog.Logger
}

// Poller reads the runtime clients from the store at Start, then every
// interval when their version changed, and hands them to Apply.
type Poller struct {
	st       Reader
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger
	apply    func([]Runtime)

	life    lifecycle.Base
	mu      sync.Mutex // serializes loads (the poll, and refresh after an admin write)
	version int64
}

// NewPoller returns a Poller of cfg.Store; Start reads the clients a
// first time.
func NewPoller(cfg PollerConfig) *Poller {
	return &Poller{st: cfg.Store, interval: cfg.Interval, apply: cfg.Apply, clock: clock.Or(cfg.Clock),
		log: cmp.Or(cfg.Logger, slog.Default())}
}

// Start reads and applies the runtime clients (an error if the store
// cannot answer), then polls until Stop.
func (p *Poller) Start(ctx context.Context) error {
	return p.life.Start(ctx, func(run context.Context) error {
		if err := p.Load(ctx); err != nil {
			return err
		}
		p.life.Go(func() { p.run(run) })
		return nil
	})
}

// Stop ends the polling.
func (p *Poller) Stop(ctx context.Context) error {
	return p.life.Stop(ctx, func(context.Context) error { return nil })
}

func (p *Poller) run(ctx context.Context) {
	for clock.Sleep(ctx, p.clock, p.interval) == nil {
		if err := p.poll(ctx); err != nil && ctx.Err() == nil {
			// The clients in force stay; the next poll tries again.
			p.log.Warn("reading the runtime clients", "err", err)
		}
	}
}

// poll reloads the clients when their version changed.
func (p *Poller) poll(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.st.ClientsVersion(ctx)
	if err != nil {
		return err
	}
	if v == p.version {
		return nil
	}
	return p.loadLocked(ctx)
}

// Load reads and applies the clients now (after an admin write, so the
// node that wrote serves the change at once).
func (p *Poller) Load(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loadLocked(ctx)
}

// loadLocked reads every runtime client and applies them. The version is read
// first: a write between the two reads is read again at the next poll.
func (p *Poller) loadLocked(ctx context.Context) error {
	v, err := p.st.ClientsVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading the runtime clients: %w", err)
	}
	stored, err := p.st.ListClients(ctx)
	if err != nil {
		return fmt.Errorf("reading the runtime clients: %w", err)
	}
	out := make([]Runtime, 0, len(stored))
	for _, sc := range stored {
		rc, err := Decode(sc)
		if err != nil {
			p.log.Warn("skipping a runtime client that cannot be read", "client", sc.Name, "err", err)
			continue
		}
		out = append(out, rc)
	}
	p.apply(out)
	p.version = v
	return nil
}

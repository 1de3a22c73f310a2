package server

import (
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

// Runtime clients are the clients created through the admin API
// (/v1/clients, clients_api.go) and kept in the job store, so every
// gateway on the store serves the same ones: each polls the store's
// clients version every Config.ClientsPoll and applies a change at once.
// The merge rule: the config's clients come first; a name the config
// uses cannot be created, changed or revoked through the API (409
// config-managed), and a runtime client whose name a reloaded config
// takes is shadowed by the config's. A gateway without clients in its
// config is open (every caller an admin) and ignores runtime clients.

// ClientKeyPrefix starts every key the admin API issues, so a leaked key
// is recognisable (secret scanners) and told apart from provider keys.
const ClientKeyPrefix = "sk-sluice-"

// clientKeyShown is how many characters of a key are kept for display
// (the prefix and 4 random characters): not enough to use it.
const clientKeyShown = len(ClientKeyPrefix) + 4

// ClientSpec is a runtime client's settings, as the store keeps them
// and the admin API shows them.
type ClientSpec struct {
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

// withDefaults fills the spec's unset fields as the config's clients'.
func (sp ClientSpec) withDefaults() ClientSpec {
	cc := ClientConfig{Role: sp.Role, DefaultPriority: sp.DefaultPriority, MaxPriority: sp.MaxPriority}
	cc = Config{Clients: []ClientConfig{cc}}.WithDefaults().Clients[0]
	sp.Role, sp.DefaultPriority, sp.MaxPriority = cc.Role, cc.DefaultPriority, cc.MaxPriority
	return sp
}

// validate checks sp by the config's own rules; its errors name the
// field (role, limits.requests_per_minute, budget.day, ...).
func (sp ClientSpec) validate(name string, upstreams map[string]bool) error {
	cc := ClientConfig{Name: name, KeySHA256: hex.EncodeToString(make([]byte, sha256.Size)), Role: sp.Role,
		DefaultPriority: sp.DefaultPriority, MaxPriority: sp.MaxPriority, Limits: sp.Limits, Budget: sp.Budget}
	if err := cc.validate(); err != nil {
		return err
	}
	if err := sp.Limits.Validate(upstreams); err != nil {
		return fmt.Errorf("limits.%w", err)
	}
	return sp.Access.Validate(upstreams)
}

// runtimeClient is a runtime client as the gateway applies it.
type runtimeClient struct {
	name    string
	spec    ClientSpec
	keys    []jobstore.ClientKey
	version int64
	created time.Time
	updated time.Time
}

func decodeRuntimeClient(sc *jobstore.StoredClient) (runtimeClient, error) {
	var spec ClientSpec
	if err := json.Unmarshal(sc.Spec, &spec); err != nil {
		return runtimeClient{}, fmt.Errorf("decoding client %q: %w", sc.Name, err)
	}
	return runtimeClient{name: sc.Name, spec: spec.withDefaults(), keys: sc.Keys, version: sc.Version,
		created: sc.CreatedAt, updated: sc.UpdatedAt}, nil
}

// newClientKey returns a new key (ClientKeyPrefix and 256 random bits)
// and its stored form.
func newClientKey(now time.Time) (string, jobstore.ClientKey, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", jobstore.ClientKey{}, fmt.Errorf("generating a key: %w", err)
	}
	key := ClientKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	d := sha256.Sum256([]byte(key))
	return key, jobstore.ClientKey{SHA256: hex.EncodeToString(d[:]), Prefix: key[:clientKeyShown], CreatedAt: now}, nil
}

// clientsStore is what the runtime clients need of the job store.
type clientsStore interface {
	ListClients(ctx context.Context) ([]*jobstore.StoredClient, error)
	ClientsVersion(ctx context.Context) (int64, error)
}

// clientsPoller reads the runtime clients from the store at Start, then
// every interval when their version changed, and hands them to apply.
type clientsPoller struct {
	st       clientsStore
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger
	apply    func([]runtimeClient)

	life    lifecycle.Base
	mu      sync.Mutex // serializes loads (the poll, and refresh after an admin write)
	version int64
}

func (p *clientsPoller) Start(ctx context.Context) error {
	return p.life.Start(ctx, func(run context.Context) error {
		if err := p.load(ctx); err != nil {
			return err
		}
		p.life.Go(func() { p.run(run) })
		return nil
	})
}

func (p *clientsPoller) Stop(ctx context.Context) error {
	return p.life.Stop(ctx, func(context.Context) error { return nil })
}

func (p *clientsPoller) run(ctx context.Context) {
	for clock.Sleep(ctx, p.clock, p.interval) == nil {
		if err := p.poll(ctx); err != nil && ctx.Err() == nil {
			// The clients in force stay; the next poll tries again.
			p.log.Warn("reading the runtime clients", "err", err)
		}
	}
}

// poll reloads the clients when their version changed.
func (p *clientsPoller) poll(ctx context.Context) error {
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

// load reads and applies the clients now (after an admin write, so the
// node that wrote serves the change at once).
func (p *clientsPoller) load(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loadLocked(ctx)
}

// loadLocked reads every runtime client and applies them. The version is read
// first: a write between the two reads is read again at the next poll.
func (p *clientsPoller) loadLocked(ctx context.Context) error {
	v, err := p.st.ClientsVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading the runtime clients: %w", err)
	}
	stored, err := p.st.ListClients(ctx)
	if err != nil {
		return fmt.Errorf("reading the runtime clients: %w", err)
	}
	out := make([]runtimeClient, 0, len(stored))
	for _, sc := range stored {
		rc, err := decodeRuntimeClient(sc)
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

// applyClients puts the config's clients cfgs (nil: keep the ones in
// force) and the runtime clients (nil: keep them) in force everywhere:
// the key lookup, the admission layer's limits and budgets, and the
// metrics' client label.
func (s *Server) applyClients(cfgs []ClientConfig, runtime []runtimeClient) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	if cfgs != nil {
		s.cfgClients = cfgs
	}
	if runtime != nil {
		s.runtime = runtime
	}
	s.clients.Store(buildClientSet(s.cfgClients, s.runtime, s.clock.Now))
	all := admitClients(s.cfgClients)
	names := make([]string, 0, len(s.cfgClients)+len(s.runtime))
	taken := map[string]bool{}
	for _, c := range s.cfgClients {
		names = append(names, c.Name)
		taken[c.Name] = true
	}
	if len(s.cfgClients) > 0 {
		for _, rc := range s.runtime {
			if !taken[rc.name] {
				all = append(all, admit.Client{Name: rc.name, Limits: rc.spec.Limits, Budget: rc.spec.Budget, Access: rc.spec.Access})
				names = append(names, rc.name)
			}
		}
	}
	// New limits and budgets; the spend already made is kept.
	s.admit.SetClients(all)
	s.view.SetClients(names)
}

// runtimeClients returns the runtime clients in force.
func (s *Server) runtimeClients() ([]ClientConfig, []runtimeClient) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	return s.cfgClients, s.runtime
}

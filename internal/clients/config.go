package clients

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/llm"
)

// Defaults for Config fields.
const (
	// DefaultPriorityDefault and MaxPriorityDefault bound a client's classes.
	DefaultPriorityDefault = llm.Normal
	MaxPriorityDefault     = llm.Critical
)

// Config is one caller allowed through the gateway: an entry of the
// config file's clients.
type Config struct {
	// Name identifies the client for fairness and logs. Required.
	// Defaults to none.
	Name string `yaml:"name"`
	// Key is the client's secret, sent as x-api-key or Authorization:
	// Bearer. Unique; one of Key, Keys or KeySHA256 is required. Defaults
	// to none.
	Key string `yaml:"key"`
	// DefaultPriority is the class used without X-Priority. Defaults to
	// normal.
	DefaultPriority string `yaml:"default_priority"`
	// MaxPriority is the most urgent class the client may ask for; more
	// urgent requests are lowered to it. Defaults to critical.
	MaxPriority string `yaml:"max_priority"`
	// Keys are more keys of the same client, valid together with Key: to
	// rotate, add the new key, move the callers to it, then remove the old
	// one (a reload, SIGHUP, is enough). Each unique. Defaults to none.
	Keys []string `yaml:"keys"`
	// Role is client (its own jobs and batches only) or admin (every
	// client's jobs and batches, pausing upstreams, requeueing across
	// clients, per-client status). Defaults to client.
	Role string `yaml:"role"`
	// Limits caps what the client may send to each upstream, checked in
	// each upstream's admission step (internal/admit). Defaults to no
	// limit.
	Limits admit.ClientLimits `yaml:"limits"`
	// KeySHA256 is one more key given as the hex SHA-256 of the key, so
	// the config file holds nothing a caller could send (generate with
	// `printf %s "$KEY" | sha256sum`). Defaults to none.
	KeySHA256 string `yaml:"key_sha256"`
	// Budget caps the client's spend in US dollars, reserved before each
	// request is sent (docs/budgets.md). Defaults to none (no cap).
	Budget admit.Budget `yaml:"budget"`
	// ServiceTiers lists the service tiers the client's requests may ask
	// for (service_tier: OpenAI auto, default, flex, scale, priority;
	// Anthropic auto, standard_only; a request without one asks for
	// auto); another is refused with 403 permission_error. Defaults to
	// none (any tier).
	ServiceTiers admit.ServiceTiers `yaml:"service_tiers"`
	// Access lists the upstreams (allowed_upstreams) and the model
	// patterns (allowed_models, '*' matching any run of characters) the
	// client may use; another is refused with 403 permission_error
	// (internal/admit). Defaults to none (any upstream, any model).
	admit.Access `yaml:",inline"`
}

// Client roles.
const (
	// RoleClient sees and manages only its own jobs and batches.
	RoleClient = "client"
	// RoleAdmin sees and manages everything, and may call the admin
	// routes. With no clients configured every caller is an admin.
	RoleAdmin = "admin"
	// RoleDefault is the role of a client that names none.
	RoleDefault = RoleClient
)

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.DefaultPriority = cmp.Or(c.DefaultPriority, DefaultPriorityDefault.String())
	c.MaxPriority = cmp.Or(c.MaxPriority, MaxPriorityDefault.String())
	c.Role = cmp.Or(c.Role, RoleDefault)
	return c
}

// Admitted is the admission layer's view of the client.
func (c Config) Admitted() admit.Client {
	return admit.Client{Name: c.Name, Limits: c.Limits, Budget: c.Budget, ServiceTiers: c.ServiceTiers, Access: c.Access}
}

// Admitted is the admission layer's view of the clients cfgs.
func Admitted(cfgs []Config) []admit.Client {
	out := make([]admit.Client, len(cfgs))
	for i, c := range cfgs {
		out[i] = c.Admitted()
	}
	return out
}

// allKeys returns the client's plain keys (Key and Keys).
func (c Config) allKeys() []string {
	var out []string
	if c.Key != "" {
		out = append(out, c.Key)
	}
	return append(out, c.Keys...)
}

// digests returns the SHA-256 of every key of the client, KeySHA256
// included (validated as 64 hex digits).
func (c Config) digests() [][sha256.Size]byte {
	var out [][sha256.Size]byte
	for _, k := range c.allKeys() {
		out = append(out, sha256.Sum256([]byte(k)))
	}
	if c.KeySHA256 != "" {
		var d [sha256.Size]byte
		_, _ = hex.Decode(d[:], []byte(strings.ToLower(c.KeySHA256)))
		out = append(out, d)
	}
	return out
}

// Validate checks the config's clients cfgs (defaulted) against the
// upstreams they may name: each client's fields, unique names and unique
// keys. Its errors start with the client's index ("[2].name: ..."), so
// that the config's validation prefixes them with "clients".
func Validate(cfgs []Config, upstreams map[string]bool) error {
	names, keys := map[string]bool{}, map[[sha256.Size]byte]bool{}
	for i, cl := range cfgs {
		if err := cl.validate(); err != nil {
			return fmt.Errorf("[%d].%w", i, err)
		}
		if err := cl.Limits.Validate(upstreams); err != nil {
			return fmt.Errorf("[%d].limits.%w", i, err)
		}
		if err := cl.Access.Validate(upstreams); err != nil { //nolint:staticcheck // named: a Config validates more than its access
			return fmt.Errorf("[%d].%w", i, err)
		}
		if names[cl.Name] {
			return fmt.Errorf("[%d].name: duplicate client %q", i, cl.Name)
		}
		for _, d := range cl.digests() {
			if keys[d] {
				return fmt.Errorf("[%d].keys: a key is used twice (by this client or another)", i)
			}
			keys[d] = true
		}
		names[cl.Name] = true
	}
	return nil
}

func (c Config) validate() error {
	if strings.TrimSpace(c.Name) == "" {
		return errors.New("name: required")
	}
	if c.Key == "" && len(c.Keys) == 0 && c.KeySHA256 == "" {
		return errors.New("key: required (e.g. key: ${SLUICE_KEY_WEB}, or keys: [...], or key_sha256: HEX)")
	}
	for j, k := range c.Keys {
		if k == "" {
			return fmt.Errorf("keys[%d]: empty key", j)
		}
	}
	if c.KeySHA256 != "" {
		if d, err := hex.DecodeString(c.KeySHA256); err != nil || len(d) != sha256.Size {
			return errors.New("key_sha256: want the 64 hex digits of the key's SHA-256")
		}
	}
	if c.Role != RoleClient && c.Role != RoleAdmin {
		return fmt.Errorf("role: %q is not admin or client", c.Role)
	}
	def, err := llm.ParsePriority(c.DefaultPriority)
	if err != nil {
		return fmt.Errorf("default_priority: %w", err)
	}
	maxP, err := llm.ParsePriority(c.MaxPriority)
	if err != nil {
		return fmt.Errorf("max_priority: %w", err)
	}
	if def < maxP {
		return fmt.Errorf("default_priority: %s is more urgent than max_priority %s", def, maxP)
	}
	if err := c.Budget.Validate(); err != nil {
		return fmt.Errorf("budget.%w", err)
	}
	if err := c.ServiceTiers.Validate(); err != nil {
		return fmt.Errorf("service_tiers%w", err)
	}
	return nil
}

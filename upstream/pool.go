package upstream

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// KeyProbeIntervalDefault is how long a key taken out of its pool (revoked,
// out of credit, over its spend cap) stays out before one real request
// probes it again.
const KeyProbeIntervalDefault = 60 * time.Second

// Key is one provider key of an upstream's pool. In YAML it is either the
// key itself (a string) or an object {key, limits, org}.
type Key struct {
	// Key is the provider key. Required.
	Key string `yaml:"key"`
	// Limits are this key's quotas; a zero field takes the upstream's
	// limits' value (so an empty Limits means "the upstream's limits").
	Limits Limits `yaml:"limits"`
	// Org names the account the key belongs to: keys of one org share its
	// account-level bucket (Config.Orgs, or learned from the provider's
	// headers). Empty: the key is its own account.
	Org string `yaml:"org"`
}

// UnmarshalYAML reads a key from a string or an object. An object's
// unknown fields are refused as a strict decoder (yaml.Decoder.KnownFields)
// refuses them elsewhere, which yaml.Node.Decode alone would not.
func (k *Key) UnmarshalYAML(n *yaml.Node) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		*k = Key{}
		return n.Decode(&k.Key)
	case yaml.MappingNode:
	default:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into an API key (a key, or {key, limits, org})", n.Line, n.ShortTag())}}
	}
	if errs := unknownFields(n, reflect.TypeFor[Key]()); len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	type plain Key
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*k = Key(p)
	return nil
}

// unknownFields lists, in the strict decoder's words, the keys of mapping
// n (and of the mappings under its struct fields) that are not YAML fields
// of struct type t.
func unknownFields(n *yaml.Node, t reflect.Type) []string {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil // a type error, which Decode reports
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		fields[name] = t.Field(i).Type
	}
	var errs []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		ft, ok := fields[key.Value]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("line %d: field %s not found in type %s", key.Line, key.Value, t))
		case ft.Kind() == reflect.Struct:
			errs = append(errs, unknownFields(val, ft)...)
		}
	}
	return errs
}

// Org is an account shared by some of a pool's keys.
type Org struct {
	// Limits are the account-level quotas every key of the org draws
	// from, on top of its own. Defaults to none known (learned from the
	// provider's headers).
	Limits Limits `yaml:"limits"`
}

// Keys returns the upstream's pool: APIKeys, or APIKey alone as a pool of
// one. Each key's Limits are resolved against the upstream's (a zero field
// takes the upstream's value).
func (c Config) Keys() []Key {
	if len(c.APIKeys) == 0 {
		return []Key{{Key: c.APIKey, Limits: c.Limits}}
	}
	out := make([]Key, len(c.APIKeys))
	for i, k := range c.APIKeys {
		k.Limits = k.Limits.or(c.Limits)
		out[i] = k
	}
	return out
}

// or fills l's zero fields from d.
func (l Limits) or(d Limits) Limits {
	l.RequestsPerMinute = cmp.Or(l.RequestsPerMinute, d.RequestsPerMinute)
	l.InputTokensPerMinute = cmp.Or(l.InputTokensPerMinute, d.InputTokensPerMinute)
	l.OutputTokensPerMinute = cmp.Or(l.OutputTokensPerMinute, d.OutputTokensPerMinute)
	l.TokensPerMinute = cmp.Or(l.TokensPerMinute, d.TokensPerMinute)
	l.MaxConcurrency = cmp.Or(l.MaxConcurrency, d.MaxConcurrency)
	l.CountTokensPerMinute = cmp.Or(l.CountTokensPerMinute, d.CountTokensPerMinute)
	return l
}

// HasKey reports whether the upstream has at least one key configured.
func (c Config) HasKey() bool { return c.APIKey != "" || len(c.APIKeys) > 0 }

func (l Limits) validate(prefix string) error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"requests_per_minute", l.RequestsPerMinute},
		{"input_tokens_per_minute", l.InputTokensPerMinute},
		{"output_tokens_per_minute", l.OutputTokensPerMinute},
		{"tokens_per_minute", l.TokensPerMinute},
		{"max_concurrency", int64(l.MaxConcurrency)},
		{"count_tokens_per_minute", l.CountTokensPerMinute},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s.%s: must be >= 0", prefix, f.name)
		}
	}
	return nil
}

// validatePool checks api_keys, orgs and key_probe_interval.
func (c Config) validatePool() error {
	if c.APIKey != "" && len(c.APIKeys) > 0 {
		return errors.New("api_keys: set api_key or api_keys, not both")
	}
	seen := map[string]bool{}
	for i, k := range c.APIKeys {
		if k.Key == "" {
			return fmt.Errorf("api_keys[%d].key: required", i)
		}
		if seen[k.Key] {
			return fmt.Errorf("api_keys[%d].key: the same key is listed twice", i)
		}
		seen[k.Key] = true
		if err := k.Limits.validate(fmt.Sprintf("api_keys[%d].limits", i)); err != nil {
			return err
		}
		if k.Org != "" && !nameRE.MatchString(k.Org) {
			return fmt.Errorf("api_keys[%d].org: %q must be 1-63 lower-case letters, digits, '-' or '_'", i, k.Org)
		}
	}
	for name, o := range c.Orgs {
		if !nameRE.MatchString(name) {
			return fmt.Errorf("orgs: %q must be 1-63 lower-case letters, digits, '-' or '_'", name)
		}
		if err := o.Limits.validate("orgs." + name + ".limits"); err != nil {
			return err
		}
		used := false
		for _, k := range c.APIKeys {
			used = used || k.Org == name
		}
		if !used {
			return fmt.Errorf("orgs.%s: no key of api_keys names this org", name)
		}
	}
	if c.KeyProbeInterval < 0 {
		return errors.New("key_probe_interval: must be >= 0")
	}
	return nil
}

package pricing

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// What a request for a model without a price does (Config.Unknown).
const (
	// UnknownFallback prices it at Config.Fallback.
	UnknownFallback = "fallback"
	// UnknownRefuse refuses it (400 invalid_request_error naming the model)
	// when its client has a budget.
	UnknownRefuse = "refuse"
	// UnknownDefault is Config.Unknown's default.
	UnknownDefault = UnknownFallback
)

// Config is the gateway's price table (top-level prices: in the config).
// The zero value is the shipped table with unknown models priced at the
// dearest shipped price.
type Config struct {
	// Models adds entries to the shipped table or replaces them, by model
	// name or name prefix ("claude-sonnet-4-5" also prices its dated
	// snapshots), in USD per million tokens. Defaults to none (the shipped
	// table, see Shipped).
	Models map[string]Price `yaml:"models"`
	// Unknown says what a model found in no entry costs: "fallback" prices
	// it at Fallback; "refuse" refuses the requests of clients with a
	// budget (clients without one are still served, their spend counted at
	// Fallback). Defaults to fallback.
	Unknown string `yaml:"unknown"`
	// Fallback is the price of an unknown model. Defaults to the dearest
	// input and output prices of the table (so a budget is never
	// undercharged by an unpriced model).
	Fallback *Price `yaml:"fallback"`
	// NoShipped drops the shipped table: only Models are priced. Defaults
	// to false.
	NoShipped bool `yaml:"no_shipped"`
}

// WithDefaults returns a copy of c with Unknown defaulted.
func (c Config) WithDefaults() Config {
	if c.Unknown == "" {
		c.Unknown = UnknownDefault
	}
	return c
}

// Validate reports the first invalid field, named by its path under
// prices.
func (c Config) Validate() error {
	switch c.Unknown {
	case "", UnknownFallback, UnknownRefuse:
	default:
		return fmt.Errorf("unknown: %q is neither %q nor %q", c.Unknown, UnknownFallback, UnknownRefuse)
	}
	names := make([]string, 0, len(c.Models))
	for name := range c.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := map[string]string{}
	for _, name := range names {
		key := strings.ToLower(strings.TrimSpace(name))
		if key == "" {
			return errors.New("models: a model name is empty")
		}
		if prev, ok := seen[key]; ok {
			return fmt.Errorf("models.%s: the same model as %q (names are case-insensitive)", name, prev)
		}
		seen[key] = name
		if err := c.Models[name].Validate(); err != nil {
			return fmt.Errorf("models.%s.%w", name, err)
		}
	}
	if c.Fallback != nil {
		if err := c.Fallback.Validate(); err != nil {
			return fmt.Errorf("fallback.%w", err)
		}
	}
	return nil
}

// NewTable builds the price table c describes; c must be valid.
func NewTable(c Config) (*Table, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	entries := map[string]Price{}
	if !c.NoShipped {
		for k, v := range shipped {
			entries[k] = v
		}
	}
	for k, v := range c.Models {
		entries[strings.ToLower(strings.TrimSpace(k))] = v
	}
	var fb Price
	if c.Fallback != nil {
		fb = *c.Fallback
	} else {
		for _, p := range entries {
			p = p.WithDefaults()
			fb.Input = max(fb.Input, p.Input, p.CacheWrite)
			fb.Output = max(fb.Output, p.Output)
		}
	}
	return newTable(entries, fb, c.Unknown == UnknownRefuse), nil
}

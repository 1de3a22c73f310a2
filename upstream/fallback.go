package upstream

import (
	"errors"
	"fmt"
)

// Fallback is another upstream of the same protocol a request may be sent
// to when this one cannot serve it in time (docs/pools.md).
type Fallback struct {
	// Upstream names the fallback upstream. Required.
	Upstream string `yaml:"upstream"`
	// Models rewrites the request body's model for the fallback
	// ({from: to}); a model not listed is sent as it is.
	Models map[string]string `yaml:"models"`
}

// FallbackClass reports whether requests of class p may fall back: every
// class when FallbackClasses is empty.
func (c Config) FallbackClass(p Priority) bool {
	if len(c.FallbackClasses) == 0 {
		return true
	}
	for _, s := range c.FallbackClasses {
		if q, err := ParsePriority(s); err == nil && q == p {
			return true
		}
	}
	return false
}

// validateFallbacks checks fallbacks and fallback_classes; that the named
// upstreams exist with the same protocol is the gateway's to check.
func (c Config) validateFallbacks() error {
	seen := map[string]bool{}
	for i, f := range c.Fallbacks {
		switch {
		case f.Upstream == "":
			return fmt.Errorf("fallbacks[%d].upstream: required", i)
		case f.Upstream == c.Name:
			return fmt.Errorf("fallbacks[%d].upstream: an upstream cannot fall back to itself", i)
		case seen[f.Upstream]:
			return fmt.Errorf("fallbacks[%d].upstream: %q is listed twice", i, f.Upstream)
		}
		seen[f.Upstream] = true
		for from, to := range f.Models {
			if from == "" || to == "" {
				return fmt.Errorf("fallbacks[%d].models: model names must not be empty", i)
			}
		}
	}
	for i, s := range c.FallbackClasses {
		if _, err := ParsePriority(s); err != nil {
			return fmt.Errorf("fallback_classes[%d]: %w", i, err)
		}
	}
	if len(c.FallbackClasses) > 0 && len(c.Fallbacks) == 0 {
		return errors.New("fallback_classes: no fallbacks are configured")
	}
	return nil
}

// BatchPriorityDefault is the class of a provider batch's requests when
// batch_priority is not set.
const BatchPriorityDefault = Low

// BatchClass is the class of the requests of a batch made through the
// provider's own batch API (batch_priority; Validate has checked it).
func (c Config) BatchClass() Priority {
	if p, err := ParsePriority(c.BatchPriority); err == nil && c.BatchPriority != "" {
		return p
	}
	return BatchPriorityDefault
}

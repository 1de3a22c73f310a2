package admit

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// Prices is the price table budgets are charged at: the gateway's
// prices: section (docs/budgets.md). The pricing package defines it; the
// gateway's config names it through the layer that charges at it.
type Prices = pricing.Config

// What prices.unknown may be (pricing.Config.Unknown), for the config's
// enums.
const (
	PricesUnknownFallback = pricing.UnknownFallback
	PricesUnknownRefuse   = pricing.UnknownRefuse
)

// Budget is a client's spend budget in US dollars (priced by the price
// table). A request whose worst-case cost does not fit is refused: 429
// with retry-after for Day and Month, 402 for Total (docs/budgets.md).
type Budget struct {
	// Day caps the spend per UTC calendar day. Defaults to 0 (no cap).
	Day float64 `yaml:"day" json:"day,omitempty"`
	// Month caps the spend per UTC calendar month. Defaults to 0 (no cap).
	Month float64 `yaml:"month" json:"month,omitempty"`
	// Total caps the spend for good (a hard cap: it never resets).
	// Defaults to 0 (no cap).
	Total float64 `yaml:"total" json:"total,omitempty"`
}

// MaxBudgetUSD bounds a budget window, in US dollars.
const MaxBudgetUSD = 1_000_000_000

// limits returns b in the ledger's units.
func (b Budget) limits() quota.Limits {
	return quota.Limits{Day: pricing.FromDollars(b.Day), Month: pricing.FromDollars(b.Month), Total: pricing.FromDollars(b.Total)}
}

// Validate checks every window; its errors name the field (day, month,
// total).
func (b Budget) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"day", b.Day}, {"month", b.Month}, {"total", b.Total}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > MaxBudgetUSD {
			return fmt.Errorf("%s: %v is not an amount of US dollars between 0 and %d", f.name, f.v, MaxBudgetUSD)
		}
	}
	return nil
}

// Client is what the admission layer knows of a client: its name, its
// own limits on each upstream, its spend budget and what it may use.
type Client struct {
	Name   string
	Limits ClientLimits
	Budget Budget
	// ServiceTiers are the service tiers its requests may ask for (empty:
	// any).
	ServiceTiers ServiceTiers
	// Access are the upstreams and models it may use (empty: any).
	Access Access
}

package admit

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// ServiceTiers is a client's allow-list of the service tiers its
// requests may ask for (a request's service_tier; one without asks for
// ServiceTierUnset). Empty allows every tier.
type ServiceTiers []string

// ServiceTierUnset is the tier a request that names none asks for: both
// providers default service_tier to auto.
const ServiceTierUnset = "auto"

// knownServiceTiers are the values of service_tier the providers accept:
// OpenAI auto, default, flex, scale and priority; Anthropic auto and
// standard_only.
var knownServiceTiers = []string{"auto", "default", "flex", "scale", "priority", "standard_only"}

// Validate reports an unknown or repeated tier, naming it.
func (s ServiceTiers) Validate() error {
	seen := map[string]bool{}
	for i, t := range s {
		if !slices.Contains(knownServiceTiers, t) {
			return fmt.Errorf("[%d]: %q is not a service tier (want one of %s)", i, t, strings.Join(knownServiceTiers, ", "))
		}
		if seen[t] {
			return fmt.Errorf("[%d]: %q is listed twice", i, t)
		}
		seen[t] = true
	}
	return nil
}

// allows reports whether a request asking for tier (empty: none) may be
// sent.
func (s ServiceTiers) allows(tier string) bool {
	return len(s) == 0 || slices.Contains(s, cmp.Or(tier, ServiceTierUnset))
}

// tierRefusal is the RefusalError of a request of client whose service tier
// its allow-list does not hold: 403 permission_error, never retried (a
// job dies with it).
func tierRefusal(p llm.Protocol, client string, allowed ServiceTiers, tier string) *RefusalError {
	asked := "service_tier " + tier
	if tier == "" {
		asked = "no service_tier (" + ServiceTierUnset + ")"
	}
	return &RefusalError{Reason: RefusedServiceTier, Problem: frontdoor.Problem{Status: http.StatusForbidden, Type: "permission_error",
		Message: fmt.Sprintf("client %s may use the service tiers %s only (service_tiers in its config); this request asks for %s",
			client, strings.Join(allowed, ", "), asked)}}
}

// checkTier refuses req when its client's allow-list does not hold the
// tier it asks for (nil: it does).
func (l *Layer) checkTier(p llm.Protocol, client, tier string) *RefusalError {
	allowed := l.client(client).ServiceTiers
	if allowed.allows(tier) {
		return nil
	}
	return tierRefusal(p, client, allowed, tier)
}

// TierAllowed reports whether client's allow-list lets its requests use
// tier: what the job runtime asks before it chooses a tier for a job (the
// flex tier) that the job's body does not name.
func (l *Layer) TierAllowed(client, tier string) bool {
	return l.client(client).ServiceTiers.allows(tier)
}

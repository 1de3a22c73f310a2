package provider

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
)

// revokedMessages are texts (any status) that say the key or its account
// can no longer be used, whatever the status.
var revokedMessages = []string{
	"access terminated",
	"access has been terminated",
	"deactivated",
	"has been disabled",
	"has been revoked",
	"invalid api key",
	"invalid x-api-key",
	"incorrect api key",
}

// KeyRevoked reports whether an answer says the key that sent it cannot be
// used, for any request, until someone acts: 401 or 403 (authentication,
// permission), a billing or spend-cap answer (insufficient_quota, credit
// balance too low, usage limits: Kind Quota, except OpenAI's "Request too
// large", which is the request's own fault) or a message saying the access
// was terminated or the key deactivated. A key pool takes such a key out
// and probes it back later. Transient errors, overloads and ordinary rate
// limits never say so.
func KeyRevoked(o llm.Outcome) bool {
	switch {
	case o.Kind == llm.Success || o.Kind == llm.Overload || o.Kind == llm.Transient || o.Kind == llm.StreamFail:
		return false
	case o.Status == http.StatusUnauthorized || o.Status == http.StatusForbidden:
		return true
	case o.Kind == llm.Quota:
		return !requestTooLarge(o.Message)
	}
	msg := strings.ToLower(o.Message)
	for _, m := range revokedMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

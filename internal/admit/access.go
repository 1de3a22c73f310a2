package admit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
)

// Access is a client's allow-list of the upstreams it may send to and the
// models it may ask for: every door (a live request, a job's submit and
// call, a batch's create, a pass-through) asks the layer (Layer.Permit),
// and a request outside it is refused with 403 permission_error naming
// what is allowed. An empty list allows every upstream, or every model.
//
// A model pattern is a model name in which '*' matches any run of
// characters, none included ("claude-*", "*-mini", "gpt-4o*"); no other
// character is special, and the match is case-sensitive, as the providers'
// model names are.
//
// A fallback is a route the operator chose, not the client: a live
// request is never sent to a fallback its client may not use (the
// upstream, or the model that fallback rewrites to), it waits for its own
// upstream instead; a job routed there is held (AccessHeldFor) until its
// own upstream can take it.
type Access struct {
	// Upstreams names the upstreams the client may send to. Defaults to
	// none: every upstream.
	Upstreams []string `yaml:"allowed_upstreams" json:"allowed_upstreams,omitempty"`
	// Models are the model patterns the client may ask for ('*' matches
	// any run of characters: claude-*). Defaults to none: every model.
	Models []string `yaml:"allowed_models" json:"allowed_models,omitempty"`
}

// AccessHeldFor is how long a job's call is held back when the admission
// layer routed it to a fallback its client may not use: it comes back
// then, for its own upstream or another fallback.
const AccessHeldFor = 5 * time.Second

// RefusalError reasons (RefusalError.Reason).
const (
	// RefusedBudget: the client's spend budget (or the price table).
	RefusedBudget = "budget"
	// RefusedServiceTier: the client's service tier allow-list.
	RefusedServiceTier = "service_tier"
	// RefusedAccess: the client's allowed upstreams or models.
	RefusedAccess = "access"
)

// Validate reports an unknown upstream (upstreams are the gateway's), an
// empty or repeated entry; its errors name the field
// (allowed_upstreams[1], allowed_models[0]).
func (a Access) Validate(upstreams map[string]bool) error {
	for i, u := range a.Upstreams {
		switch {
		case !upstreams[u]:
			return fmt.Errorf("allowed_upstreams[%d]: no upstream is named %q (have %s)", i, u, strings.Join(sortedNames(upstreams), ", "))
		case slices.Index(a.Upstreams, u) != i:
			return fmt.Errorf("allowed_upstreams[%d]: %q is listed twice", i, u)
		}
	}
	for i, m := range a.Models {
		switch {
		case strings.TrimSpace(m) == "":
			return fmt.Errorf("allowed_models[%d]: empty pattern (a model name, '*' matching any run of characters, e.g. claude-*)", i)
		case slices.Index(a.Models, m) != i:
			return fmt.Errorf("allowed_models[%d]: %q is listed twice", i, m)
		}
	}
	return nil
}

func sortedNames(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// allowsUpstream reports whether the client may send to upstream.
func (a Access) allowsUpstream(upstream string) bool {
	return len(a.Upstreams) == 0 || slices.Contains(a.Upstreams, upstream)
}

// allowsModel reports whether the client may ask for model. A request
// that names no model (a pass-through, a files upload) is not checked
// against the models: its upstream is.
func (a Access) allowsModel(model string) bool {
	if len(a.Models) == 0 || model == "" {
		return true
	}
	return slices.ContainsFunc(a.Models, func(p string) bool { return MatchModel(p, model) })
}

// MatchModel reports whether model matches pattern, in which '*' matches
// any run of characters (none included) and every other character itself.
func MatchModel(pattern, model string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == model
	}
	if !strings.HasPrefix(model, parts[0]) {
		return false
	}
	rest := model[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return len(rest) >= len(last) && strings.HasSuffix(rest, last)
}

// accessRefusal is the RefusalError of a request of client to upstream for
// model that its allow-list does not hold: 403 permission_error, never
// retried (a job dies with it).
func accessRefusal(client, upstream, model string, a Access) *RefusalError {
	var msg string
	if !a.allowsUpstream(upstream) {
		msg = fmt.Sprintf("client %s may not use upstream %s: it may use %s only (allowed_upstreams in its settings)",
			client, upstream, strings.Join(a.Upstreams, ", "))
	} else {
		msg = fmt.Sprintf("client %s may not use model %q: it may use the models %s only (allowed_models in its settings; '*' matches any run of characters)",
			client, model, strings.Join(a.Models, ", "))
	}
	return &RefusalError{Reason: RefusedAccess, Problem: frontdoor.Problem{Status: http.StatusForbidden, Type: "permission_error", Message: msg},
		err: ErrNotAllowed}
}

// ErrNotAllowed is wrapped by the RefusalError of a request its client's
// allowed upstreams or models do not hold.
var ErrNotAllowed = errors.New("not allowed for this client")

// allows reports whether client may send a request for model to
// upstream.
func (l *Layer) allows(client, upstream, model string) bool {
	a := l.client(client).Access
	return a.allowsUpstream(upstream) && a.allowsModel(model)
}

// Permit refuses (a *RefusalError, 403 permission_error) a request of client
// to upstream for model ("" when the request names none: only the
// upstream is checked) that the client's allowed upstreams and models do
// not hold; nil when they do. The doors that queue work for later (a
// job's submit, a batch's create) and the pass-through call it before
// accepting a request; Do and AdmitNow check it themselves.
func (l *Layer) Permit(client, upstream, model string) error {
	if l.allows(client, upstream, model) {
		return nil
	}
	return l.refused(client, upstream, accessRefusal(client, upstream, model, l.client(client).Access))
}

// refused tells the observer of rf, a refusal of client's request to
// upstream, and returns it.
func (l *Layer) refused(client, upstream string, rf *RefusalError) *RefusalError {
	l.obs.Refused(client, upstream, rf.Reason, rf.Problem.Message)
	return rf
}

// held tells the observer of h, a job's call of client held back on
// upstream for reason, and returns it.
func (l *Layer) held(client, upstream, reason string, h *HeldError) *HeldError {
	l.obs.Held(client, upstream, reason, h.Limit)
	return h
}

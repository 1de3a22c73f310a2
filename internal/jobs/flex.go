package jobs

import (
	"bytes"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// OpenAI's flex service tier for jobs (upstream.Flex, docs/config.md): a
// job on an upstream of Config.FlexMinSlack whose body names no
// service_tier and whose deadline is at least the slack away is sent with
// "service_tier": "flex", so it is billed (and budgeted) at the flex price.
// The provider's answer when flex has no capacity (429
// resource_unavailable, classified as an overload: backed off, one
// attempt) sends the job's later attempts in the standard tier, so it can
// still finish before its deadline. Live requests never come here.

// flexTier is the service tier the rule puts jobs in.
const flexTier = "flex"

// flexPaths are the endpoints OpenAI serves in the flex tier.
var flexPaths = []string{"/v1/chat/completions", "/v1/responses"}

// flexRefused reports an attempt the provider refused for want of flex
// capacity: its 429 resource_unavailable is the one 429 classified as an
// overload (provider.Classify).
func flexRefused(e jobstore.AttemptError) bool {
	return e.Status == http.StatusTooManyRequests && e.Kind == llm.Overload.String()
}

// tierChecker is the admission layer's client tier allow-list
// (admit.Layer.TierAllowed).
type tierChecker interface {
	TierAllowed(client, tier string) bool
}

// flexRequest returns j's request sent in the flex tier when the rule
// allows it, else nil; req is the request as the job's body asks.
func (w *worker) flexRequest(j *jobstore.Job, req *dispatch.Request, now time.Time) *dispatch.Request {
	slack, on := w.s.cfg.FlexMinSlack[w.upstream]
	switch {
	case !on, w.protocol != llm.OpenAI, req.Cost.ServiceTier != "", !slices.Contains(flexPaths, j.Path),
		!j.Deadline.IsZero() && j.Deadline.Sub(now) < slack, slices.ContainsFunc(j.Errors, flexRefused):
		return nil
	}
	if tc, ok := w.s.cfg.Admission.(tierChecker); ok && !tc.TierAllowed(j.Client, flexTier) {
		return nil
	}
	body := withServiceTier(j.Body, flexTier)
	if body == nil {
		return nil
	}
	flex := *j
	flex.Body = body
	fr, rerr := jobRequest(w.protocol, &flex, now)
	if rerr != nil {
		return nil
	}
	return fr
}

// withServiceTier is body, a JSON object without service_tier, with
// "service_tier": tier as its first member (the rest byte for byte, so the
// prompt and its cache prefix are unchanged); nil when body is not an
// object.
func withServiceTier(body []byte, tier string) []byte {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	rest := bytes.TrimLeft(b[1:], " \t\r\n")
	member := `"service_tier":"` + tier + `"`
	if len(rest) > 0 && rest[0] == '}' {
		return []byte("{" + member + "}")
	}
	return slices.Concat([]byte("{"+member+","), rest)
}

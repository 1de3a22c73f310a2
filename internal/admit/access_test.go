package admit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

func TestMatchModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, model string
		want           bool
	}{
		{"claude-sonnet-4-5", "claude-sonnet-4-5", true},
		{"claude-sonnet-4-5", "claude-sonnet-4-5-20250929", false},
		{"claude-*", "claude-haiku-4-5", true},
		{"claude-*", "claude-", true},
		{"claude-*", "gpt-4o", false},
		{"claude-*", "Claude-haiku", false},
		{"*-mini", "gpt-4o-mini", true},
		{"*-mini", "gpt-4o-mini-2024", false},
		{"gpt-*-mini", "gpt-4o-mini", true},
		{"gpt-*-mini", "gpt-mini", false},
		{"*", "anything", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"ab*ba", "aba", false},
		{"claude.*", "claudeX", false},
	} {
		require.Equal(t, tc.want, admit.MatchModel(tc.pattern, tc.model), "%q ~ %q", tc.pattern, tc.model)
	}
}

func TestAccessValidate(t *testing.T) {
	t.Parallel()
	ups := map[string]bool{"main": true, "backup": true}
	require.NoError(t, admit.Access{}.Validate(ups))
	require.NoError(t, admit.Access{Upstreams: []string{"main"}, Models: []string{"claude-*", "gpt-4o"}}.Validate(ups))
	for _, tc := range []struct {
		a    admit.Access
		want string
	}{
		{admit.Access{Upstreams: []string{"main", "nope"}}, `allowed_upstreams[1]: no upstream is named "nope" (have backup, main)`},
		{admit.Access{Upstreams: []string{"main", "main"}}, `allowed_upstreams[1]: "main" is listed twice`},
		{admit.Access{Models: []string{" "}}, `allowed_models[0]: empty pattern`},
		{admit.Access{Models: []string{"a*", "a*"}}, `allowed_models[1]: "a*" is listed twice`},
	} {
		require.ErrorContains(t, tc.a.Validate(ups), tc.want)
	}
}

// TestAccessOnEveryDoor: a client's allowed upstreams and models refuse,
// on the live door (Do) and the job door (AdmitNow) alike, a request for
// an upstream or a model outside them with 403 permission_error naming
// what the client may use, for good (no retry-after), before anything is
// sent; Permit, which the queueing doors ask at submit, says the same.
func TestAccessOnEveryDoor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		access   admit.Access
		upstream string
		model    string
		want     string // "" admitted; else in the message
	}{
		{name: "no lists: anything", upstream: "main", model: "claude-sonnet-4-5"},
		{name: "its upstream", access: admit.Access{Upstreams: []string{"main"}}, upstream: "main", model: "claude-sonnet-4-5"},
		{name: "another upstream", access: admit.Access{Upstreams: []string{"backup"}}, upstream: "main", model: "claude-sonnet-4-5",
			want: "client acme may not use upstream main: it may use backup only"},
		{name: "a model its pattern matches", access: admit.Access{Models: []string{"claude-sonnet-*"}}, upstream: "main", model: "claude-sonnet-4-5"},
		{name: "a model outside its patterns", access: admit.Access{Models: []string{"claude-haiku-*", "gpt-4o"}}, upstream: "main", model: "claude-sonnet-4-5",
			want: `client acme may not use model "claude-sonnet-4-5": it may use the models claude-haiku-*, gpt-4o only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, admit.Client{Name: "acme", Access: tc.access})
			req := request("acme")
			req.Cost.Model = tc.model
			resp, liveErr := r.l.Do(context.Background(), tc.upstream, req, false, nil)
			target := mustRoute(t, r.l, tc.upstream)
			adm, jobErr := r.l.AdmitNow(target, request("acme"))
			permitErr := r.l.Permit("acme", tc.upstream, tc.model)
			if tc.want == "" {
				require.NoError(t, liveErr)
				require.NoError(t, resp.Body.Close())
				require.NoError(t, jobErr)
				adm.Settle(dispatch.End{}, false)
				require.NoError(t, permitErr)
				return
			}
			for _, err := range []error{liveErr, jobErr, permitErr} {
				var rf *admit.RefusalError
				require.ErrorAs(t, err, &rf)
				require.ErrorIs(t, err, admit.ErrNotAllowed)
				require.Equal(t, http.StatusForbidden, rf.Problem.Status)
				require.Equal(t, "permission_error", rf.Problem.Type)
				require.Equal(t, admit.RefusedAccess, rf.Reason)
				require.Contains(t, rf.Problem.Message, tc.want)
				require.True(t, rf.RetryAt.IsZero(), "for good: a job dies with it")
			}
			require.Zero(t, r.main.calls()+r.backup.calls(), "nothing was sent")
		})
	}
}

// TestAccessKeepsAFallbackOut: a fallback the client may not use (its
// upstream, or the model that fallback rewrites to) is not a route for
// it: its live request stays on its own upstream, and its job's call
// routed there is held (not refused, not an attempt) for AccessHeldFor;
// a client that may use it is sent there.
func TestAccessKeepsAFallbackOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		access admit.Access
		via    string // who serves the live request
	}{
		{name: "may use both", access: admit.Access{Upstreams: []string{"main", "backup"}}, via: "backup"},
		{name: "the fallback's upstream is not its", access: admit.Access{Upstreams: []string{"main"}}, via: "main"},
		{name: "the fallback's model is not its", access: admit.Access{Models: []string{"claude-sonnet-*"}}, via: "main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, admit.Client{Name: "acme", Access: tc.access})
			r.main.unavailable = true // the router prefers the fallback
			var trail admit.Trail
			resp, err := r.l.Do(context.Background(), "main", request("acme"), false, &trail)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tc.via, trail.ServedBy())

			route, ok := r.l.RouteJobs("main", llm.High, "", request("acme").Cost)
			require.True(t, ok)
			target := route.Target
			require.Equal(t, "backup", target.Upstream)
			require.True(t, target.Fallback())
			req := target.Rewrite(*request("acme"))
			adm, err := r.l.AdmitNow(target, &req)
			if tc.via == "backup" {
				require.NoError(t, err)
				adm.Settle(dispatch.End{}, false)
				return
			}
			var held *admit.HeldError
			require.ErrorAs(t, err, &held)
			require.Equal(t, t0.Add(admit.AccessHeldFor), held.RetryAt)
			require.Contains(t, held.Limit, "the fallback backup")
		})
	}
}

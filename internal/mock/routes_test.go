package mock

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoutesAreDocumented: every route the mock registers is in
// docs/mock.md's Endpoints table, and every route the table lists is
// registered, so a route cannot go undocumented (issue 27: the key
// revoke and restore routes were).
func TestRoutesAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/mock.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "## Endpoints\n")
	require.True(t, ok, "docs/mock.md has an Endpoints section")
	table, _, _ = strings.Cut(table, "\n\n")
	table = strings.TrimSpace(table[strings.Index(table, "|"):])
	routeRE := regexp.MustCompile("`((?:GET|POST|DELETE|PUT|PATCH) /[^`\\s]*)`")
	var documented []string
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 3, line)
		for _, m := range routeRE.FindAllStringSubmatch(cells[1], -1) {
			documented = append(documented, m[1])
		}
	}
	s, err := New(Config{})
	require.NoError(t, err)
	var registered []string
	for _, rt := range s.routes() {
		registered = append(registered, rt.pattern)
	}
	slices.Sort(documented)
	slices.Sort(registered)
	require.Equal(t, registered, documented, "docs/mock.md's Endpoints table lists exactly the mock's routes")
}

// TestUnroutedRequests: a path no route has is a 404 and a route's path
// with another method a 405, in the provider's error shape; a path not in
// its clean form is not redirected.
func TestUnroutedRequests(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	require.NoError(t, err)
	for _, tc := range []struct {
		method, path, auth string
		status             int
		body               string
	}{
		{http.MethodGet, "/v1/messages", "", http.StatusMethodNotAllowed, `"type":"invalid_request_error"`},
		{http.MethodGet, "/v1/nothing", "", http.StatusNotFound, `"type":"not_found_error"`},
		{http.MethodGet, "/v1/models", "Bearer k", http.StatusNotFound, `Invalid URL (GET /v1/models)`},
		{http.MethodPut, "/v1/batches/b1", "Bearer k", http.StatusMethodNotAllowed, `Method PUT not allowed`},
		{http.MethodPost, "/v1//messages", "", http.StatusNotFound, `"type":"not_found_error"`},
		{http.MethodPost, "/v1/messages/", "", http.StatusNotFound, `"type":"not_found_error"`},
		{http.MethodGet, "/mock/keys/k/revoke", "", http.StatusMethodNotAllowed, `Method GET not allowed`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		require.Equal(t, tc.status, rec.Code, "%s %s: %s", tc.method, tc.path, rec.Body)
		require.Contains(t, rec.Body.String(), tc.body, "%s %s", tc.method, tc.path)
		require.Contains(t, rec.Header().Get("Content-Type"), "application/json", "%s %s", tc.method, tc.path)
	}
}

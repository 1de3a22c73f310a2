package mock

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRevokeAndRestoreKey: a revoked key gets each protocol's answer, the
// other keys are untouched, and a restored key is served again.
func TestRevokeAndRestoreKey(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{})
	require.Equal(t, http.StatusOK, call(s, http.MethodPost, "/mock/keys/k1/revoke", nil, "").Code)

	w := anth(s, "k1", anthropicBody)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "authentication_error", decode(t, w.Body.Bytes())["error"].(map[string]any)["type"])
	w = oai(s, "k1", openAIBody)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "invalid_api_key", decode(t, w.Body.Bytes())["error"].(map[string]any)["code"])
	require.Equal(t, http.StatusOK, anth(s, "k2", anthropicBody).Code)

	require.Equal(t, http.StatusOK, call(s, http.MethodPost, "/mock/keys/k1/revoke?as=no_credit", nil, "").Code)
	w = oai(s, "k1", openAIBody)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "insufficient_quota", decode(t, w.Body.Bytes())["error"].(map[string]any)["code"])
	require.Equal(t, http.StatusBadRequest, anth(s, "k1", anthropicBody).Code)
	require.Equal(t, http.StatusBadRequest, call(s, http.MethodPost, "/mock/keys/k1/revoke?as=nonsense", nil, "").Code)

	require.Equal(t, http.StatusOK, call(s, http.MethodPost, "/mock/keys/k1/restore", nil, "").Code)
	require.Equal(t, http.StatusOK, anth(s, "k1", anthropicBody).Code)
	require.Equal(t, http.StatusNotFound, call(s, http.MethodPost, "/mock/keys/k1/explode", nil, "").Code)
}

// TestAccountBucketIsShared: keys of one account draw from its bucket on
// top of their own.
func TestAccountBucketIsShared(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{RPM: 600}, BurstSeconds: 1,
		Accounts: map[string]Account{"acme": {Keys: []string{"a1", "a2"}, Limits: Limits{RPM: 120}}}})
	ok := 0
	for i := range 10 {
		key := []string{"a1", "a2"}[i%2]
		if anth(s, key, anthropicBody).Code == http.StatusOK {
			ok++
		}
	}
	require.Equal(t, 2, ok, "the account's 1 s burst at 120 RPM holds 2 requests")
	require.Equal(t, http.StatusOK, anth(s, "solo", anthropicBody).Code, "a key of no account is not limited by it")

	_, err := New(Config{Accounts: map[string]Account{"x": {Keys: []string{"k"}}, "y": {Keys: []string{"k"}}}})
	require.ErrorContains(t, err, "already in account")
	_, err = New(Config{Accounts: map[string]Account{"x": {}}})
	require.ErrorContains(t, err, "accounts.x.keys")
}

package mock

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Account is an account-level bucket shared by some API keys: a request
// with one of its keys must fit the key's own buckets and the account's.
type Account struct {
	// Keys are the API keys of the account.
	Keys []string `yaml:"keys"`
	// Limits are the account's per-minute limits (0 = unlimited).
	Limits Limits `yaml:"limits"`
}

// KeyRevocation is how a revoked key is answered.
type KeyRevocation string

// The ways a key can be revoked.
const (
	// KeyRevoked answers 401: Anthropic authentication_error, OpenAI
	// invalid_api_key.
	KeyRevoked KeyRevocation = "revoked"
	// KeyNoCredit answers as an account out of credit: OpenAI 429
	// insufficient_quota, Anthropic 400 "credit balance is too low".
	KeyNoCredit KeyRevocation = "no_credit"
)

// revocations holds the keys revoked at run time.
type revocations struct{ m sync.Map } // key → KeyRevocation

// RevokeKey makes the mock refuse key as how says (KeyRevoked or
// KeyNoCredit) until RestoreKey; POST /mock/keys/{key}/revoke[?as=no_credit]
// does the same over HTTP.
func (s *Server) RevokeKey(key string, how KeyRevocation) error {
	if how != KeyRevoked && how != KeyNoCredit {
		return fmt.Errorf("revoking key: want %q or %q, got %q", KeyRevoked, KeyNoCredit, how)
	}
	s.revoked.m.Store(key, how)
	return nil
}

// RestoreKey accepts key again (POST /mock/keys/{key}/restore).
func (s *Server) RestoreKey(key string) { s.revoked.m.Delete(key) }

// handleKeys serves POST /mock/keys/{key}/revoke and /restore.
func (s *Server) handleKeys(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/mock/keys/")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || r.Method != http.MethodPost {
		return false
	}
	key, action := rest[:i], rest[i+1:]
	switch action {
	case "revoke":
		how := KeyRevocation(r.URL.Query().Get("as"))
		if how == "" {
			how = KeyRevoked
		}
		if err := s.RevokeKey(key, how); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return true
		}
		writeJSON(w, http.StatusOK, map[string]string{"revoked": string(how)})
	case "restore":
		s.RestoreKey(key)
		writeJSON(w, http.StatusOK, map[string]bool{"restored": true})
	default:
		return false
	}
	return true
}

// refused answers a request whose key is revoked; false when it is not.
func (x *exchange) refused() bool {
	v, ok := x.s.revoked.m.Load(x.key)
	if !ok {
		return false
	}
	switch {
	case v == KeyNoCredit && x.proto == protoOpenAI:
		x.fail(&apiError{status: http.StatusTooManyRequests, typ: "insufficient_quota", code: "insufficient_quota",
			message: "You exceeded your current quota, please check your plan and billing details."}, nil)
	case v == KeyNoCredit:
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error",
			message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}, nil)
	case x.proto == protoOpenAI:
		x.fail(&apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
			message: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."}, nil)
	default:
		x.fail(&apiError{status: http.StatusUnauthorized, typ: "authentication_error", message: "invalid x-api-key"}, nil)
	}
	return true
}

// account returns the account bucket state of key in scope, nil when the
// key belongs to no account.
func (q *quotas) account(scope, key string, now time.Time) *keyState {
	name, ok := q.accountOf[key]
	if !ok {
		return nil
	}
	id := scope + "\x00account\x00" + name
	if v, ok := q.keys.Load(id); ok {
		return v.(*keyState)
	}
	v, _ := q.keys.LoadOrStore(id, q.newState(scope, q.accountLimits[name], now))
	return v.(*keyState)
}

// validateAccounts checks the accounts: limits >= 0, a key in one account
// at most.
func validateAccounts(accounts map[string]Account) error {
	seen := map[string]string{}
	for name, a := range accounts {
		for _, f := range []struct {
			n string
			v int64
		}{{"rpm", a.Limits.RPM}, {"itpm", a.Limits.ITPM}, {"otpm", a.Limits.OTPM}, {"tpm", a.Limits.TPM},
			{"count_tokens_rpm", a.Limits.CountTokensRPM}} {
			if f.v < 0 {
				return fmt.Errorf("accounts.%s.limits.%s must be >= 0 (0 = unlimited), got %d", name, f.n, f.v)
			}
		}
		if len(a.Keys) == 0 {
			return fmt.Errorf("accounts.%s.keys: at least one key is required", name)
		}
		for _, k := range a.Keys {
			if other, dup := seen[k]; dup {
				return fmt.Errorf("accounts.%s.keys: a key is already in account %s", name, other)
			}
			seen[k] = name
		}
	}
	return nil
}

package jobstore

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Runtime clients (docs/http-api.md, /v1/clients): the gateway's clients
// created, changed and revoked through its admin API rather than its config
// file, kept in the store so that every gateway on it serves the same ones.
// The store keeps each client's settings as an opaque JSON document (the
// gateway defines and validates it) and its keys as SHA-256 digests; it
// never sees a key.
//
// A revoked client stays as a tombstone (no keys, no settings) so that its
// revocation changes ClientsVersion like any other write; its name may be
// created again.

// StoredClient is one runtime client.
type StoredClient struct {
	Name string
	// Spec is the client's settings, a JSON document the store keeps as
	// it is.
	Spec json.RawMessage
	// Keys are the client's valid keys, by digest.
	Keys []ClientKey
	// Version changes with every write of the client (UpdateClient's
	// IfVersion compares it).
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ClientKey is one key of a runtime client.
type ClientKey struct {
	// SHA256 is the hex SHA-256 of the key (64 lowercase hex digits).
	SHA256 string `json:"sha256"`
	// Prefix is the key's first characters, kept to tell keys apart in
	// listings; it is not enough to use the key.
	Prefix string `json:"prefix"`
	// CreatedAt is when the key was issued.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt ends the key's validity (a rotated key's grace period);
	// zero means it does not expire.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// CreateClientParams creates a runtime client.
type CreateClientParams struct {
	Name string
	Spec json.RawMessage
	Keys []ClientKey
	Now  time.Time
}

// UpdateClientParams replaces a runtime client's settings and keys.
type UpdateClientParams struct {
	Name string
	Spec json.RawMessage
	Keys []ClientKey
	// IfVersion, when not zero, makes the update fail with ErrConflict
	// unless the client's Version is still IfVersion (a read-modify-write
	// that lost a race).
	IfVersion int64
	Now       time.Time
}

// DeleteClientParams revokes a runtime client.
type DeleteClientParams struct {
	Name string
	Now  time.Time
}

// ClientNameMax bounds a client's name.
const ClientNameMax = 128

func validClientName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return invalid("Name", "required")
	case len(name) > ClientNameMax:
		return invalid("Name", "longer than %d bytes", ClientNameMax)
	}
	return nil
}

func validClient(name string, spec json.RawMessage, keys []ClientKey, now time.Time) error {
	if err := validClientName(name); err != nil {
		return err
	}
	if !json.Valid(spec) {
		return invalid("Spec", "not a JSON document")
	}
	if len(keys) == 0 {
		return invalid("Keys", "at least one key is required")
	}
	for i, k := range keys {
		if d, err := hex.DecodeString(k.SHA256); err != nil || len(d) != 32 || strings.ToLower(k.SHA256) != k.SHA256 {
			return invalid("Keys", "key %d: SHA256 is not 64 lowercase hex digits", i)
		}
	}
	if now.IsZero() {
		return invalid("Now", "required")
	}
	return nil
}

func (p *CreateClientParams) validate() error { return validClient(p.Name, p.Spec, p.Keys, p.Now) }

func (p *UpdateClientParams) validate() error {
	if p.IfVersion < 0 {
		return invalid("IfVersion", "must be >= 0")
	}
	return validClient(p.Name, p.Spec, p.Keys, p.Now)
}

func (p *DeleteClientParams) validate() error {
	if p.Now.IsZero() {
		return invalid("Now", "required")
	}
	return validClientName(p.Name)
}

// encodeClientKeys is the keys column's text.
func encodeClientKeys(keys []ClientKey) (string, error) {
	norm := make([]ClientKey, len(keys))
	for i, k := range keys {
		k.CreatedAt = storeTime(k.CreatedAt).UTC()
		if !k.ExpiresAt.IsZero() {
			k.ExpiresAt = storeTime(k.ExpiresAt).UTC()
		}
		norm[i] = k
	}
	b, err := json.Marshal(norm)
	if err != nil {
		return "", fmt.Errorf("encoding client keys: %w", err)
	}
	return string(b), nil
}

func decodeClientKeys(s string) ([]ClientKey, error) {
	var keys []ClientKey
	if err := json.Unmarshal([]byte(s), &keys); err != nil {
		return nil, fmt.Errorf("decoding client keys: %w", err)
	}
	return keys, nil
}

// Package webhook holds how Sluice signs the webhooks it sends, in one
// place for the sender (internal/jobs) and for receivers (the root
// package's VerifyWebhook): the Standard Webhooks headers
// (https://www.standardwebhooks.com) keyed by a configured secret, and the
// legacy X-Sluice-Signature.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SignatureHeader carries the legacy signature of a webhook body: "sha256="
// and the hex HMAC-SHA256 of the body keyed with the secret string. The
// Standard Webhooks headers (webhook-id, webhook-timestamp,
// webhook-signature) are sent beside it.
const SignatureHeader = "X-Sluice-Signature"

// The Standard Webhooks headers.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// Sign returns the X-Sluice-Signature value of body under secret:
// "sha256=" and the hex HMAC-SHA256.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature reports whether sig is body's X-Sluice-Signature under
// secret, in constant time.
func VerifySignature(secret string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(sig))
}

// NewSigner returns the Standard Webhooks signer and verifier for a
// configured webhook secret: a "whsec_" secret is base64 after the prefix
// (the Standard Webhooks format); any other string is used as the key as
// it is.
func NewSigner(secret string) (*standardwebhooks.Webhook, error) {
	if strings.HasPrefix(secret, "whsec_") {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("a whsec_ secret must be base64 after the prefix: %w", err)
		}
		return wh, nil
	}
	return standardwebhooks.NewWebhookRaw([]byte(secret))
}

package jobs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SignatureHeader carries the legacy signature of a webhook body: "sha256="
// and the hex HMAC-SHA256 of the body keyed with the secret string. The
// Standard Webhooks headers (webhook-id, webhook-timestamp,
// webhook-signature) are sent beside it.
const SignatureHeader = "X-Sluice-Signature"

// The Standard Webhooks headers.
const (
	HeaderWebhookID        = standardwebhooks.HeaderWebhookID
	HeaderWebhookTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderWebhookSignature = standardwebhooks.HeaderWebhookSignature
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

// NewWebhookVerifier returns the Standard Webhooks verifier for a
// configured webhook secret: a "whsec_" secret is base64 after the prefix
// (the Standard Webhooks format); any other string is used as the key as
// it is.
func NewWebhookVerifier(secret string) (*standardwebhooks.Webhook, error) {
	return newWebhookSigner(secret)
}

func newWebhookSigner(secret string) (*standardwebhooks.Webhook, error) {
	if strings.HasPrefix(secret, "whsec_") {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("a whsec_ secret must be base64 after the prefix: %w", err)
		}
		return wh, nil
	}
	return standardwebhooks.NewWebhookRaw([]byte(secret))
}

// errWebhookStatus marks a POST the receiver answered with a non-2xx.
var errWebhookStatus = errors.New("webhook receiver refused")

// webhookHost is what logs may show of a webhook URL: its host (and port),
// never its path or query, where tokens often live.
func webhookHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	return u.Host
}

// post sends one signed webhook POST at now and returns the receiver's
// status (0 when it did not answer). Its error never holds the URL.
func (s *Service) post(ctx context.Context, rawURL, id string, body []byte, now time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("building webhook request: invalid url")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-webhook")
	req.Header.Set(HeaderWebhookID, id)
	// The timestamp is this attempt's, as the Standard Webhooks spec wants
	// (receivers reject stale ones: a retry hours later must still verify);
	// the event's time is the body's finished_at.
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	if s.signer != nil {
		sig, err := s.signer.Sign(id, now, body)
		if err != nil {
			return 0, fmt.Errorf("signing webhook: %w", err)
		}
		req.Header.Set(HeaderWebhookSignature, sig)
		req.Header.Set(SignatureHeader, Sign(s.cfg.WebhookSecret, body))
	}
	resp, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error's text holds the whole URL
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return 0, fmt.Errorf("posting webhook: no answer within %v", s.cfg.WebhookTimeout)
		}
		return 0, fmt.Errorf("posting webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("%w: status %d", errWebhookStatus, resp.StatusCode)
	}
	return resp.StatusCode, nil
}

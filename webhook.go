package sluice

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/internal/webhook"
)

// ErrWebhookID means a webhook request carries no webhook-id header.
var ErrWebhookID = errors.New("webhook: missing webhook-id header")

// VerifyWebhook checks a job completion webhook sent by a Sluice gateway,
// the Standard Webhooks way (https://www.standardwebhooks.com): the
// webhook-signature header must be the HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" keyed with secret (the
// gateway's jobs.webhook_secret: a "whsec_" secret is base64 after the
// prefix, any other string is the key as it is), and webhook-timestamp
// must be within 5 minutes of now (so a captured request cannot be
// replayed later). It returns the webhook-id: one delivery keeps its id on
// every retry, so a receiver deduplicates by it, answering 2xx to an id it
// has already processed without processing it again.
//
// Any Standard Webhooks library verifies the same headers; this function
// is github.com/standard-webhooks/standard-webhooks/libraries/go's Verify.
func VerifyWebhook(secret string, body []byte, header http.Header) (id string, err error) {
	wh, err := webhook.NewSigner(secret)
	if err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	if err := wh.Verify(body, header); err != nil {
		return "", fmt.Errorf("verifying webhook: %w", err)
	}
	id = header.Get(webhook.HeaderID)
	if id == "" {
		return "", ErrWebhookID
	}
	return id, nil
}

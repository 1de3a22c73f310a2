package jobs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/clock"
)

// SignatureHeader carries a webhook body's HMAC.
const SignatureHeader = "X-Sluice-Signature"

// Sign returns the X-Sluice-Signature value of body under secret:
// "sha256=" and the hex HMAC-SHA256.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature reports whether sig is body's signature under secret,
// in constant time. Receivers call it.
func VerifySignature(secret string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(sig))
}

// errWebhookStatus marks a delivery the receiver did not accept.
var errWebhookStatus = errors.New("webhook receiver refused")

// webhook delivers job id's completion in the background.
func (s *Service) webhook(id int64) {
	s.mu.Lock()
	ctx := s.hooksCtx
	s.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		s.cfg.Observer.Webhook(WebhookAbandoned)
		return
	}
	s.hooks.Add(1)
	go func() {
		defer s.hooks.Done()
		if err := s.deliver(ctx, id); err != nil {
			s.cfg.Logger.Warn("delivering job webhook", "job", id, "err", err)
		}
	}()
}

// deliver POSTs the job's JSON to its webhook until a 2xx, retrying with a
// doubling delay up to WebhookMaxAttempts times.
func (s *Service) deliver(ctx context.Context, id int64) error {
	obs := s.cfg.Observer
	j, err := s.store.Get(ctx, id)
	if err != nil {
		obs.Webhook(WebhookAbandoned)
		return fmt.Errorf("loading job: %w", err)
	}
	body, err := json.Marshal(s.view(j, true))
	if err != nil {
		obs.Webhook(WebhookAbandoned)
		return fmt.Errorf("encoding job: %w", err)
	}
	delay := s.cfg.WebhookBaseDelay
	for attempt := 1; ; attempt++ {
		err = s.post(ctx, j.WebhookURL, body)
		switch {
		case err == nil:
			obs.Webhook(WebhookDelivered)
		case attempt >= s.cfg.WebhookMaxAttempts:
			obs.Webhook(WebhookGaveUp)
		default:
			obs.Webhook(WebhookFailed)
		}
		if err == nil || attempt >= s.cfg.WebhookMaxAttempts {
			break
		}
		if err := clock.Sleep(ctx, s.cfg.Clock, delay); err != nil {
			obs.Webhook(WebhookAbandoned)
			return fmt.Errorf("waiting to retry webhook: %w", err)
		}
		delay *= 2
	}
	if err != nil {
		return fmt.Errorf("after %d attempts: %w", s.cfg.WebhookMaxAttempts, err)
	}
	return nil
}

func (s *Service) post(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-webhook")
	if s.cfg.WebhookSecret != "" {
		req.Header.Set(SignatureHeader, Sign(s.cfg.WebhookSecret, body))
	}
	resp, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		return fmt.Errorf("posting webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: status %d", errWebhookStatus, resp.StatusCode)
	}
	return nil
}

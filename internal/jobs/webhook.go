package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/webhook"
)

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
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Webhooks.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("building webhook request: invalid url")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-webhook")
	req.Header.Set(webhook.HeaderID, id)
	// The timestamp is this attempt's, as the Standard Webhooks spec wants
	// (receivers reject stale ones: a retry hours later must still verify);
	// the event's time is the body's finished_at.
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	if s.signer != nil {
		sig, err := s.signer.Sign(id, now, body)
		if err != nil {
			return 0, fmt.Errorf("signing webhook: %w", err)
		}
		req.Header.Set(webhook.HeaderSignature, sig)
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(s.cfg.WebhookSecret, body))
	}
	resp, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error's text holds the whole URL
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return 0, fmt.Errorf("posting webhook: no answer within %v", s.cfg.Webhooks.Timeout)
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

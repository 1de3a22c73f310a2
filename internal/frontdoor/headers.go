package frontdoor

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Request headers Sluice reads. None of them is sent upstream.
const (
	// HeaderPriority picks the class: critical, high, normal, low or 0–3
	// (case-insensitive). Any other value is answered 400.
	HeaderPriority = "X-Priority"
	// HeaderDeadline bounds queueing and retries: a positive Go duration
	// from now ("30s", "2m") or an RFC 3339 instant.
	HeaderDeadline = "X-Sluice-Deadline"
	// HeaderSession names the conversation a request belongs to: requests
	// of one session stay on the pool's key that holds their prompt cache
	// (docs/pools.md). Never forwarded.
	HeaderSession = "X-Sluice-Session"
	// HeaderClient names the caller for fairness inside a class on the
	// in-process Transport (WithClient takes precedence). The gateway
	// ignores what a client sends in it and uses the authenticated name.
	HeaderClient = "X-Sluice-Client"
	// HeaderStainlessTimeout is the official SDKs' own per-attempt timeout
	// in seconds; it is the deadline when X-Sluice-Deadline is absent. It
	// is forwarded upstream like any other client header.
	HeaderStainlessTimeout = "X-Stainless-Timeout"
)

// Response headers Sluice sets.
const (
	// HeaderQueueMS is how long the request waited in Sluice's queue before
	// its first upstream attempt, in whole milliseconds.
	HeaderQueueMS = "X-Sluice-Queue-Ms"
	// HeaderAttempts is how many upstream attempts Sluice made (0 when it
	// gave up before sending anything).
	HeaderAttempts = "X-Sluice-Attempts"
	// HeaderUpstream names the upstream that answered (the primary or a
	// fallback).
	HeaderUpstream = "X-Sluice-Upstream"
	// HeaderKey is the fingerprint of the pool's key the answer came from
	// (first 8 hex digits of its SHA-256), never the key.
	HeaderKey = "X-Sluice-Key"
	// HeaderRequestID is the gateway's id for one request: returned on
	// every proxied answer (success or error) and sent upstream, set by
	// Build after the client's headers are cleaned, so that a line in
	// Sluice's log can be matched with the provider's.
	HeaderRequestID = "X-Sluice-Request-Id"
	// HeaderShouldRetry tells the official SDKs whether to retry (true or
	// false); it overrides their own status rules.
	HeaderShouldRetry = "X-Should-Retry"
	// HeaderRetryAfter is whole seconds, rounded up.
	HeaderRetryAfter = "Retry-After"
	// HeaderRetryAfterMS is milliseconds; the SDKs read it first.
	HeaderRetryAfterMS = "Retry-After-Ms"
)

// hopByHop are the connection-specific headers (RFC 9110 §7.6.1), never
// forwarded in either direction.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// credentialHeaders carry a client's key; the upstream gets the upstream's
// key instead.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "Proxy-Authorization"}

// sluiceRequestHeaders are read by Sluice, never forwarded. Every other
// X-Sluice-* header is dropped too (isSluiceHeader).
var sluiceRequestHeaders = []string{HeaderPriority, HeaderDeadline, HeaderClient}

// transportHeaders are set by the HTTP client that sends the request
// upstream: Content-Length and Host from the request itself, and
// Accept-Encoding so that the client decompresses the answer and the
// engine can read the usage in it.
var transportHeaders = []string{"Content-Length", "Host", "Accept-Encoding"}

// CleanHeader returns a copy of a client's request headers as they may go
// upstream: without hop-by-hop headers (and those Connection names), the
// client's credentials, Sluice's own headers (X-Priority and every
// X-Sluice-*) and the headers the HTTP client sets itself. Everything else
// (anthropic-version, anthropic-beta, OpenAI-Organization, User-Agent,
// X-Stainless-*) is kept as the client sent it.
func CleanHeader(in http.Header) http.Header {
	h := in.Clone()
	if h == nil {
		h = http.Header{}
	}
	RemoveHopByHop(h)
	for k := range h {
		// By canonical name: a map filled by hand may hold "x-api-key".
		ck := http.CanonicalHeaderKey(k)
		if slices.Contains(credentialHeaders, ck) || slices.Contains(sluiceRequestHeaders, ck) ||
			slices.Contains(transportHeaders, ck) || isSluiceHeader(ck) {
			delete(h, k)
		}
	}
	return h
}

// isSluiceHeader reports whether name (canonical or not) is X-Sluice-*.
func isSluiceHeader(name string) bool {
	const prefix = "x-sluice-"
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

// RemoveHopByHop deletes the hop-by-hop headers from h, including those
// the Connection header names.
func RemoveHopByHop(h http.Header) {
	drop := slices.Clone(hopByHop)
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) != "Connection" {
			continue
		}
		for _, f := range vs {
			for _, name := range strings.Split(f, ",") {
				if name = strings.TrimSpace(name); name != "" {
					drop = append(drop, http.CanonicalHeaderKey(name))
				}
			}
		}
	}
	for k := range h {
		if slices.Contains(drop, http.CanonicalHeaderKey(k)) {
			delete(h, k)
		}
	}
}

// SetSluiceHeaders sets x-sluice-queue-ms and x-sluice-attempts.
func SetSluiceHeaders(h http.Header, queueWait time.Duration, attempts int) {
	h.Set(HeaderQueueMS, strconv.FormatInt(max(queueWait.Milliseconds(), 0), 10))
	h.Set(HeaderAttempts, strconv.Itoa(max(attempts, 0)))
}

// SetRetryAfter sets retry-after (whole seconds, rounded up, at least 1)
// and retry-after-ms (at least 1) for a positive hint; for no hint it
// removes both.
func SetRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		h.Del(HeaderRetryAfter)
		h.Del(HeaderRetryAfterMS)
		return
	}
	secs := max(ceilDiv(d, time.Second), 1)
	ms := max(ceilDiv(d, time.Millisecond), 1)
	h.Set(HeaderRetryAfter, strconv.FormatInt(secs, 10))
	h.Set(HeaderRetryAfterMS, strconv.FormatInt(ms, 10))
}

// ceilDiv is d/unit rounded up, for a positive d (no overflow near the
// largest duration).
func ceilDiv(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit != 0 {
		n++
	}
	return n
}

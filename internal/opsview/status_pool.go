package opsview

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// KeyStatus is one key of an upstream's pool in /v1/status, named by its
// fingerprint (never the key).
type KeyStatus struct {
	Key string `json:"key"`
	Org string `json:"org,omitempty"`
	// InFlight and MaxConcurrency: requests using the key now, and its
	// slots.
	InFlight       int `json:"in_flight"`
	MaxConcurrency int `json:"max_concurrency"`
	// Buckets are the key's own quota buckets with a known limit;
	// OrgBuckets its org's.
	Buckets    map[string]BucketStatus `json:"buckets"`
	OrgBuckets map[string]BucketStatus `json:"org_buckets,omitempty"`
	// PausedUntil is set while the key is paused after a 429.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Out is set while the key is taken out of the pool: since when, why,
	// and when one request probes it again.
	Out       bool       `json:"out"`
	OutSince  *time.Time `json:"out_since,omitempty"`
	OutReason string     `json:"out_reason,omitempty"`
	ProbeAt   *time.Time `json:"probe_at,omitempty"`
	// Requests, RateLimited and Revoked count attempts sent with the key,
	// 429 answers and times it was taken out.
	Requests    uint64 `json:"requests"`
	RateLimited uint64 `json:"rate_limited"`
	Revoked     uint64 `json:"revoked"`
}

// poolStatus returns e's keys for /v1/status (nil without an engine).
func poolStatus(e Engine, now time.Time) []KeyStatus {
	if e == nil {
		return nil
	}
	buckets := func(bs [flow.NumDims]flow.BucketState) map[string]BucketStatus {
		m := map[string]BucketStatus{}
		for d, b := range bs {
			if b.Capacity > 0 {
				m[flow.Dim(d).String()] = bucketStatus(flow.Dim(d), b)
			}
		}
		return m
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	var out []KeyStatus
	for _, k := range e.Keys() {
		ks := KeyStatus{Key: k.Fingerprint, Org: k.Org, InFlight: k.InFlight, MaxConcurrency: k.MaxConcurrency,
			Buckets: buckets(k.Buckets), Out: k.Out, Requests: k.Requests, RateLimited: k.RateLimited, Revoked: k.Revoked}
		if k.Org != "" {
			ks.OrgBuckets = buckets(k.OrgBuckets)
		}
		if k.PausedUntil.After(now) {
			ks.PausedUntil = at(k.PausedUntil)
		}
		if k.Out {
			ks.OutSince, ks.OutReason, ks.ProbeAt = at(k.OutSince), k.OutReason, at(k.ProbeAt)
		}
		out = append(out, ks)
	}
	return out
}

// Package mock is a simulated LLM provider: it answers the Anthropic
// Messages API (POST /v1/messages, /v1/messages/count_tokens) and the OpenAI
// Chat Completions, Responses and embeddings APIs (POST
// /v1/chat/completions, /v1/responses and its retrieval, cancel and
// input_items, /v1/embeddings) with the status codes, headers, error
// bodies and SSE event sequences of the real services (docs/provider-semantics
// §1–2), so the gateway and the official SDKs can be tested against it
// without network access or cost.
//
// Each API key has its own continuously refilled token buckets (Anthropic
// RPM, ITPM, OTPM, and a request bucket for count_tokens; OpenAI RPM and
// combined TPM), its own prompt caches with TTLs (cache.go: Anthropic
// breakpoints, OpenAI prefix caching, counted against the limits as the
// providers count them) and its own stored responses. A bucket's rate is
// limit/60 per second and its depth BurstSeconds of refill; a request that
// does not fit gets the provider's 429 with retry-after = ceil(deficit/rate).
// Faults (overload, storms, outages, 5xx, mid-stream errors, connection
// resets, slowness, spend caps) are decided before admission and cost no
// quota. Replies are generated deterministically from the seed and the
// request body; one word is one output token.
//
// The mock deliberately shares no code with the gateway's provider, flow or
// dispatch packages: a test oracle that shares the code it checks can only
// agree with it. Time comes from an injected clock.Clock.
//
// GET /mock/stats reports what was admitted (per key and overall), including
// the exact maximum admitted in any sliding 60 s window; POST /mock/reset
// clears statistics and refills every bucket.
package mock

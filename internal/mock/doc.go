// Package mock is a simulated LLM provider: it answers the Anthropic
// Messages API (POST /v1/messages, /v1/messages/count_tokens) and the OpenAI
// Chat Completions API (POST /v1/chat/completions) with the status codes,
// headers, error bodies and SSE event sequences of the real services
// (docs/provider-semantics §1–2), so the gateway and the official SDKs can be
// tested against it without network access or cost.
//
// Each API key has its own continuously refilled token buckets (Anthropic
// RPM, ITPM, OTPM; OpenAI RPM and combined TPM). A bucket's rate is
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

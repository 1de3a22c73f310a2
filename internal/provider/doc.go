// Package provider understands the providers' wire protocols (Anthropic
// Messages and count_tokens; OpenAI Chat Completions, Responses and
// embeddings, each an Endpoint): the cost of a request before it is sent,
// the usage a response reports (JSON or SSE, prompt-cache reads and writes
// and the service tier included), the cacheable prefix of a request and the
// providers' caching rules, the rate-limit headers, the retry hints, and
// the classification of every outcome into the classes the engine acts on.
// It is pure: no queues, no servers, and time only as a `now` parameter.
package provider

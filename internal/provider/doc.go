// Package provider understands the providers' wire protocols (Anthropic
// Messages, OpenAI Chat Completions): the cost of a request before it is
// sent, the usage a response reports (JSON or SSE), the rate-limit headers,
// the retry hints, and the classification of every outcome into the classes
// the engine acts on. It is pure: no queues, no servers, and time only as a
// `now` parameter.
package provider

// Package pricing prices LLM requests in US dollars: a table of per-model
// prices (input, output, cache read and cache write, per million tokens),
// shipped with defaults for the current Anthropic and OpenAI models and
// overridden by the gateway's config (top-level prices:).
//
// A model is looked up by its exact name, then by the longest table entry
// that is a prefix of it ending at a separator ("-", "_", ":", "@", "/"),
// so "claude-sonnet-4-5-20250929" finds "claude-sonnet-4-5" and
// "gpt-4o-2024-11-20" finds "gpt-4o" while "gpt-4o" never finds "gpt-4".
//
// Amounts are held as integer nano-dollars (Amount) so that sums never
// drift; a request's cost is rounded up to the next nano-dollar.
//
// The shipped prices are the providers' list prices for the standard tier
// as of PricesAsOf (no batch discount, prompts within the standard context
// window); they change, so production users should check them and
// override in the config.
package pricing

// Package batches is Sluice's client of the providers' Batch APIs: it
// submits a group of requests as one provider batch (Anthropic Message
// Batches; OpenAI Files + Batch), reads its state, streams its results and
// cancels or cleans it up. It is what the batch router calls; the router
// decides what to group and when.
//
// One Client speaks one protocol to one upstream with one key. Every call
// takes a context first and does one or two HTTP exchanges; nothing runs in
// the background and nothing is retried here, so the caller (which holds
// the crash-safe record of the batch) decides what to do with each error.
// Errors are *Error values whose Unwrap is one of the sentinels the router
// branches on: ErrLimit (the provider's batch limits or rate limits, with
// the retry hint in Error.Outcome), ErrNotFound, ErrInvalid, ErrUnavailable,
// ErrQuota and ErrRejected.
//
// Batch normalises the two life cycles (Anthropic in_progress → canceling →
// ended; OpenAI validating → in_progress → finalizing → completed | failed |
// expired | cancelling → cancelled) to Ended and Counts, keeping the
// provider's own status. Results are read as the provider writes them, in
// any order, one Result per custom_id, with the line's usage parsed by
// package provider (the same parser the synchronous path bills from).
package batches

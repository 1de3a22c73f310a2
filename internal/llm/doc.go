// Package llm is the vocabulary every part of Sluice shares when it talks
// about one LLM call: the wire Protocol it speaks, the Priority class it is
// scheduled in, the Usage the provider reports, and the Outcome of an
// upstream attempt with its OutcomeKind. It holds plain types and their
// parsers only, so that the store, the engine, the front doors and the CLI
// can all name them without importing each other.
//
// Protocol and Priority are aliases of the public upstream.Protocol and
// upstream.Priority: the user's config (package upstream, which imports
// nothing of the module) names them, so they are defined there once and
// read here under their engine names.
//
// "Class" always means a priority class here; what an attempt ended in is
// its outcome kind.
package llm

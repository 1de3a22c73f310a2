// Package upstream holds the one configuration of an upstream (a provider
// API and how Sluice shapes its traffic): the YAML the gateway reads, the
// struct the engine is built from, and the source of the public
// sluice.Upstream. Its defaults are defined here once; a profile
// (latency, throughput, balanced) fills the fields a user left zero before
// the defaults fill the rest. The engine (internal/dispatch) converts a
// defaulted, validated Config into the flow algorithms' settings.
package upstream

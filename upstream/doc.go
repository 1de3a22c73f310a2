// Package upstream is the configuration of one upstream (a provider API
// and how Sluice shapes its traffic), defined once for everyone who reads
// it: the gateway decodes each entry of its YAML upstreams: list into a
// Config, the Go library's sluice.Upstream is the same type, and the engine
// is built from it. It also defines the two words the config is written
// in, Protocol and Priority, which the engine's internal vocabulary
// aliases.
//
// A Config is written the way the YAML reads: every field has its YAML
// name, and Validate names a bad field by its YAML path
// ("retry.base_delay: must be <= retry.max_delay"). A zero field takes its
// profile's value (latency, throughput, balanced), else its default; the
// defaults are the XxxDefault constants here, filled in by the pure
// WithDefaults. docs/config.md lists every field, and every example there
// and in docs/pools.md decodes into a Config.
//
// The package imports nothing else of Sluice, so that the root package and
// every part of the engine can import it.
package upstream

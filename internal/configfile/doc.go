// Package configfile reads the gateway's YAML config file the way a user
// needs it read: every mistake is one line that says where it is (file,
// line, and the field's YAML path such as
// upstreams[0].limits.requests_per_minute), what is wrong in YAML's words
// ("want a whole number", never a Go type) and, where it can tell, what was
// meant ("did you mean requests_per_minute?", "durations need a unit:
// 10s"). It also writes the JSON Schema of the config (Schema), from the
// same Go types and their doc comments, for editors and CI.
//
// The model: the YAML document is parsed to a yaml.Node tree, which keeps
// every value's line; Expand replaces its environment references
// (${NAME}, ${NAME:-default}); Check walks that tree beside the Go type it will be
// decoded into and reports the first node the type cannot take; the caller
// then decodes the tree and validates the result, and At turns a
// validation error that starts with a YAML path into an Error at that
// path's line.
package configfile

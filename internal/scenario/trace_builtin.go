package scenario

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The public traces shipped with Sluice, converted to the generic CSV form
// (timestamp_ms, input_tokens, output_tokens, and Mooncake's hash_ids) and
// gzipped; traces/README.md gives their sources, licences and how they
// were converted.
//
//go:embed traces/*.csv.gz
var builtinTraceFiles embed.FS

// BuiltinTrace is a trace that --trace can name instead of a file.
type BuiltinTrace struct {
	// Name is what --trace takes.
	Name string
	// Summary says what it is, its licence and its source.
	Summary string
	file    string
	gen     func(name string) (*Trace, error)
}

// SyntheticBurstyName is the built-in synthetic trace: BurstyTrace's
// defaults with seed 1.
const SyntheticBurstyName = "synthetic-bursty"

// BuiltinTraces returns the built-in traces.
func BuiltinTraces() []BuiltinTrace {
	return []BuiltinTrace{
		{Name: "azure-code", file: "traces/azure-code.csv.gz",
			Summary: "Azure LLM inference trace 2023, coding service: 8,819 requests over 58 min, bursty (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"},
		{Name: "azure-conv", file: "traces/azure-conv.csv.gz",
			Summary: "Azure LLM inference trace 2023, conversation service: 19,366 requests over 58 min, steady (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"},
		{Name: "mooncake-conv", file: "traces/mooncake-conv.csv.gz",
			Summary: "Mooncake FAST'25 conversation trace: 12,031 requests over 59 min, inputs p50 6.9k / max 126k tokens, with hash_ids (Apache-2.0, Qin et al., FAST 2025)"},
		{Name: SyntheticBurstyName, gen: func(name string) (*Trace, error) { return GenerateBursty(name, BurstyTrace{Seed: 1}) },
			Summary: "generated: 1 h of on/off bursts (12 req/s for ~30 s, 0.25 req/s for ~90 s), lognormal inputs (median 1,000) with a 5 % Pareto tail, lognormal outputs (median 150)"},
	}
}

// ErrUnknownTrace is returned by LoadTrace for a source that is neither a
// built-in trace nor a readable file.
var ErrUnknownTrace = errors.New("unknown trace")

// LoadTrace returns the built-in trace named source, else reads the file
// at path source (see ReadTrace for the formats).
func LoadTrace(source string) (*Trace, error) {
	for _, b := range BuiltinTraces() {
		if b.Name != source {
			continue
		}
		if b.gen != nil {
			return b.gen(b.Name)
		}
		data, err := builtinTraceFiles.ReadFile(b.file)
		if err != nil {
			return nil, fmt.Errorf("reading built-in trace %s: %w", b.Name, err)
		}
		tr, err := ReadTrace(b.file, bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		tr.Name = b.Name
		return tr, nil
	}
	f, err := os.Open(source)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			names := []string{}
			for _, b := range BuiltinTraces() {
				names = append(names, b.Name)
			}
			return nil, fmt.Errorf("%w %q: no such file, and not a built-in (%s)", ErrUnknownTrace, source, strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	return ReadTrace(source, f)
}

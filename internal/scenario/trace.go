package scenario

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// A trace is a list of recorded requests: when each arrived and how many
// tokens it read and wrote. Two formats are read, each optionally gzipped
// (recognized by its magic bytes, whatever the name):
//
//   - CSV with a header row. Azure's LLM inference trace (TIMESTAMP as
//     "2023-11-16 18:17:03.9799600", ContextTokens, GeneratedTokens) or the
//     generic columns timestamp (seconds, a decimal number) or timestamp_ms,
//     input_tokens, output_tokens, and optionally class
//     (critical/high/normal/low or 0-3), max_tokens and hash_ids (ids
//     separated by spaces, "a-b" for a run of consecutive ids). Other
//     columns are ignored.
//   - JSON Lines, one object per line: Mooncake's form (timestamp in
//     milliseconds, input_length, output_length, hash_ids) or the generic
//     field names above (timestamp then in seconds); hash_ids is an array of
//     ids (or the CSV's text form).
//
// Column and field names are case-insensitive, and any of the names of a
// field may be used in either format. Numeric timestamps are offsets from
// the trace's zero (so two traces converted against one epoch stay
// aligned), except that values from 1e9 s on (Unix time) are rebased to the
// earliest; date-times are rebased to the earliest. Records are sorted by
// arrival, ties kept in file order.

// Trace field names, as the error messages spell them.
const (
	fieldTimestamp    = "timestamp"
	fieldTimestampMS  = "timestamp_ms"
	fieldInputTokens  = "input_tokens"
	fieldOutputTokens = "output_tokens"
	fieldClass        = "class"
	fieldMaxTokens    = "max_tokens"
	fieldHashIDs      = "hash_ids"
)

// traceFieldNames maps every accepted column or key name (lower case) to
// the field it spells.
var traceFieldNames = map[string]string{
	"timestamp":       fieldTimestamp,
	"timestamp_ms":    fieldTimestampMS,
	"input_tokens":    fieldInputTokens,
	"contexttokens":   fieldInputTokens, // Azure
	"input_length":    fieldInputTokens, // Mooncake
	"output_tokens":   fieldOutputTokens,
	"generatedtokens": fieldOutputTokens, // Azure
	"output_length":   fieldOutputTokens, // Mooncake
	"class":           fieldClass,
	"max_tokens":      fieldMaxTokens,
	"hash_ids":        fieldHashIDs,
}

// Trace input bounds: beyond them a value is an error, not a request.
const (
	// TraceTokensMax bounds a record's input, output and max_tokens.
	TraceTokensMax = 10_000_000
	// TraceHashIDsMax bounds the hash ids of one record.
	TraceHashIDsMax = 1 << 16
	// traceLineMax bounds one JSONL line.
	traceLineMax = 16 << 20
	// epochSeconds is where a numeric timestamp is taken for Unix time.
	epochSeconds = 1e9
	// timestampMaxSeconds keeps offsets within a time.Duration.
	timestampMaxSeconds = 9e9
)

// TraceRecord is one recorded request.
type TraceRecord struct {
	// At is the arrival time from the trace's zero.
	At time.Duration `json:"at_ns"`
	// InputTokens and OutputTokens are the prompt's and the reply's sizes.
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// MaxTokens is the request's max_tokens when recorded, else 0.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Class is the recorded priority class, when ClassSet.
	Class    llm.Priority `json:"class"`
	ClassSet bool         `json:"class_set"`
	// HashIDs are Mooncake's prompt block hashes (a shared id is a shared
	// prefix block), when recorded.
	HashIDs []int64 `json:"hash_ids,omitempty"`
}

// Trace is a named list of records sorted by arrival.
type Trace struct {
	Name    string
	Records []TraceRecord
}

// TraceError is an input a trace parser refused: where, and which field.
type TraceError struct {
	// File names the input; Line is 1-based (0 when the error is about the
	// whole file); Field is the field's name ("" when not about one).
	File  string
	Line  int
	Field string
	Err   error
}

func (e *TraceError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *TraceError) Unwrap() error { return e.Err }

// ReadTrace reads a trace from r, gunzipping it when it starts with the
// gzip magic bytes. The format comes from name's extension (".csv",
// ".jsonl", ".json" or ".ndjson", before any ".gz"), else from the first
// byte: '{' is JSON Lines, anything else CSV. name is used in errors.
func ReadTrace(name string, r io.Reader) (*Trace, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &TraceError{File: name, Err: fmt.Errorf("opening gzip: %w", err)}
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	switch strings.ToLower(path.Ext(strings.TrimSuffix(strings.ToLower(name), ".gz"))) {
	case ".csv":
		return ParseTraceCSV(name, br)
	case ".jsonl", ".json", ".ndjson":
		return ParseTraceJSONL(name, br)
	}
	for {
		b, err := br.Peek(1)
		if err != nil || len(b) == 0 {
			return ParseTraceCSV(name, br) // empty: the CSV parser says so
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.ReadByte()
			continue
		case '{':
			return ParseTraceJSONL(name, br)
		}
		return ParseTraceCSV(name, br)
	}
}

// traceRow is one record's raw values, before conversion.
type traceRow struct {
	line int
	vals map[string]string // by field; JSON strings unquoted
	ids  []int64           // a JSON hash_ids array, when given as one
	// msStamp: timestamp is in milliseconds (Mooncake's form, recognized
	// by its input_length name).
	msStamp bool
}

// stamp is a parsed timestamp: an offset, or a date-time to rebase.
type stamp struct {
	off time.Duration
	abs time.Time
	// dated is true for a date-time.
	dated bool
}

// traceBuilder converts rows and rebases their timestamps.
type traceBuilder struct {
	file    string
	recs    []TraceRecord
	stamps  []stamp
	dated   int // rows with a date-time timestamp
	numeric int
}

func (tb *traceBuilder) fail(line int, field string, err error) error {
	return &TraceError{File: tb.file, Line: line, Field: field, Err: err}
}

// add converts one row.
func (tb *traceBuilder) add(r traceRow) error {
	var rec TraceRecord
	st, err := tb.timestamp(r)
	if err != nil {
		return err
	}
	if rec.InputTokens, err = tb.integer(r, fieldInputTokens, 0, true); err != nil {
		return err
	}
	if rec.OutputTokens, err = tb.integer(r, fieldOutputTokens, 0, true); err != nil {
		return err
	}
	if rec.MaxTokens, err = tb.integer(r, fieldMaxTokens, 1, false); err != nil {
		return err
	}
	if v := strings.TrimSpace(r.vals[fieldClass]); v != "" {
		p, err := llm.ParsePriority(v)
		if err != nil {
			return tb.fail(r.line, fieldClass, err)
		}
		rec.Class, rec.ClassSet = p, true
	}
	rec.HashIDs = r.ids
	if v, ok := r.vals[fieldHashIDs]; ok && r.ids == nil {
		if rec.HashIDs, err = parseHashIDs(v); err != nil {
			return tb.fail(r.line, fieldHashIDs, err)
		}
	}
	tb.recs = append(tb.recs, rec)
	tb.stamps = append(tb.stamps, st)
	return nil
}

// timestamp reads timestamp_ms, else timestamp, and checks that a file
// does not mix date-times with numbers.
func (tb *traceBuilder) timestamp(r traceRow) (stamp, error) {
	field, unit := fieldTimestampMS, float64(time.Millisecond)
	v, ok := r.vals[fieldTimestampMS]
	if !ok {
		field, unit = fieldTimestamp, float64(time.Second)
		if r.msStamp {
			unit = float64(time.Millisecond)
		}
		if v, ok = r.vals[fieldTimestamp]; !ok {
			return stamp{}, tb.fail(r.line, fieldTimestamp, errors.New("missing (want timestamp, timestamp_ms or TIMESTAMP)"))
		}
	}
	v = strings.TrimSpace(v)
	var st stamp
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		secs := f * unit / float64(time.Second)
		if !(secs >= 0 && secs < timestampMaxSeconds) {
			return stamp{}, tb.fail(r.line, field, fmt.Errorf("must be a number of seconds in [0, %g), got %q", timestampMaxSeconds, v))
		}
		st.off = time.Duration(f * unit)
		tb.numeric++
	} else if field == fieldTimestamp {
		t, err := parseDateTime(v)
		if err != nil {
			return stamp{}, tb.fail(r.line, field, fmt.Errorf("want seconds or a date-time like 2023-11-16 18:17:03.9799600, got %q", clip(v)))
		}
		st.abs, st.dated = t, true
		tb.dated++
	} else {
		return stamp{}, tb.fail(r.line, field, fmt.Errorf("want milliseconds, got %q", clip(v)))
	}
	if tb.dated > 0 && tb.numeric > 0 {
		return stamp{}, tb.fail(r.line, field, errors.New("mixes date-times and numbers in one file"))
	}
	return st, nil
}

// dateTimeLayouts are the date-times a timestamp may be written in (UTC
// unless a zone is given); fractional seconds of any length are accepted.
var dateTimeLayouts = []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", time.RFC3339Nano, "2006-01-02 15:04:05Z07:00"}

func parseDateTime(v string) (time.Time, error) {
	var first error
	for _, l := range dateTimeLayouts {
		t, err := time.Parse(l, v)
		if err == nil {
			return t, nil
		}
		if first == nil {
			first = err
		}
	}
	return time.Time{}, first
}

// integer reads an integer field in [lo, TraceTokensMax]; an absent or
// empty optional field is 0.
func (tb *traceBuilder) integer(r traceRow, field string, lo int, required bool) (int, error) {
	v, ok := r.vals[field]
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		if required {
			return 0, tb.fail(r.line, field, errors.New("missing"))
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		// JSON writers may print 1200 as 1200.0 or 1.2e3.
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 2*TraceTokensMax {
			return 0, tb.fail(r.line, field, fmt.Errorf("want an integer, got %q", clip(v)))
		}
		n = int64(f)
	}
	if n < int64(lo) || n > TraceTokensMax {
		return 0, tb.fail(r.line, field, fmt.Errorf("must be in [%d, %d], got %d", lo, TraceTokensMax, n))
	}
	return int(n), nil
}

// parseHashIDs reads ids separated by spaces (or commas), "a-b" for the
// run a, a+1, …, b.
func parseHashIDs(s string) ([]int64, error) {
	var out []int64
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		lo, hi, isRun := strings.Cut(f, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("want non-negative integer ids or runs a-b, got %q", clip(f))
		}
		b := a
		if isRun {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("want a run a-b with a <= b, got %q", clip(f))
			}
		}
		if b-a >= TraceHashIDsMax || len(out)+int(b-a)+1 > TraceHashIDsMax {
			return nil, fmt.Errorf("more than %d ids", TraceHashIDsMax)
		}
		for id := a; id <= b; id++ {
			out = append(out, id)
		}
	}
	return out, nil
}

// finish rebases the timestamps and sorts the records.
func (tb *traceBuilder) finish() (*Trace, error) {
	if len(tb.recs) == 0 {
		return nil, tb.fail(0, "", errors.New("no records"))
	}
	if tb.dated > 0 {
		earliest := tb.stamps[0].abs
		for _, s := range tb.stamps {
			if s.abs.Before(earliest) {
				earliest = s.abs
			}
		}
		for i, s := range tb.stamps {
			tb.recs[i].At = s.abs.Sub(earliest)
		}
	} else {
		earliest := slices.MinFunc(tb.stamps, func(a, b stamp) int { return cmp.Compare(a.off, b.off) }).off
		if earliest < time.Duration(epochSeconds*float64(time.Second)) {
			earliest = 0
		}
		for i, s := range tb.stamps {
			tb.recs[i].At = s.off - earliest
		}
	}
	slices.SortStableFunc(tb.recs, func(a, b TraceRecord) int { return cmp.Compare(a.At, b.At) })
	return &Trace{Name: tb.file, Records: tb.recs}, nil
}

// ParseTraceCSV reads a CSV trace with a header row (see ReadTrace for
// the columns). name is used in errors and as the trace's name.
func ParseTraceCSV(name string, r io.Reader) (*Trace, error) {
	tb := &traceBuilder{file: name}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, tb.fail(0, "", errors.New("empty: want a header row"))
		}
		return nil, csvError(name, err)
	}
	cols := map[int]string{}
	seen := map[string]string{}
	ms := false
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		f, ok := traceFieldNames[h]
		if !ok {
			continue
		}
		if prev, dup := seen[f]; dup {
			return nil, tb.fail(1, f, fmt.Errorf("given twice (columns %q and %q)", prev, h))
		}
		seen[f], cols[i] = h, f
		ms = ms || h == "input_length"
	}
	for _, need := range []struct{ field, names string }{
		{fieldInputTokens, "input_tokens, ContextTokens or input_length"},
		{fieldOutputTokens, "output_tokens, GeneratedTokens or output_length"},
	} {
		if _, ok := seen[need.field]; !ok {
			return nil, tb.fail(1, need.field, fmt.Errorf("no such column (want %s)", need.names))
		}
	}
	if seen[fieldTimestamp] == "" && seen[fieldTimestampMS] == "" {
		return nil, tb.fail(1, fieldTimestamp, errors.New("no such column (want timestamp, timestamp_ms or TIMESTAMP)"))
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(name, err)
		}
		line, _ := cr.FieldPos(0)
		row := traceRow{line: line, vals: map[string]string{}, msStamp: ms}
		for i, f := range cols {
			row.vals[f] = rec[i]
		}
		if err := tb.add(row); err != nil {
			return nil, err
		}
	}
	return tb.finish()
}

// csvError names the file and line of a CSV syntax error.
func csvError(name string, err error) error {
	if pe, ok := errors.AsType[*csv.ParseError](err); ok {
		return &TraceError{File: name, Line: pe.Line, Err: pe.Err}
	}
	return &TraceError{File: name, Err: fmt.Errorf("reading: %w", err)}
}

// ParseTraceJSONL reads a JSON Lines trace, one object per line (see
// ReadTrace for the fields); blank lines are skipped. name is used in
// errors and as the trace's name.
func ParseTraceJSONL(name string, r io.Reader) (*Trace, error) {
	tb := &traceBuilder{file: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), traceLineMax)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		row, err := jsonRow(tb, line, b)
		if err != nil {
			return nil, err
		}
		if err := tb.add(row); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line longer than %d bytes", traceLineMax)
		}
		return nil, tb.fail(line+1, "", err)
	}
	return tb.finish()
}

// jsonRow reads one JSONL object into a row.
func jsonRow(tb *traceBuilder, line int, b []byte) (traceRow, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("null")
		}
		return traceRow{}, tb.fail(line, "", fmt.Errorf("want a JSON object: %w", err))
	}
	row := traceRow{line: line, vals: map[string]string{}}
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		raw := bytes.TrimSpace(obj[k])
		lk := strings.ToLower(k)
		f, ok := traceFieldNames[lk]
		if !ok || bytes.Equal(raw, []byte("null")) {
			continue
		}
		if prev, dup := seen[f]; dup {
			return traceRow{}, tb.fail(line, f, fmt.Errorf("given twice (%q and %q)", prev, k))
		}
		seen[f] = k
		row.msStamp = row.msStamp || lk == "input_length"
		switch {
		case len(raw) > 0 && raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return traceRow{}, tb.fail(line, f, err)
			}
			row.vals[f] = s
		case f == fieldHashIDs && len(raw) > 0 && raw[0] == '[':
			ids, err := jsonHashIDs(raw)
			if err != nil {
				return traceRow{}, tb.fail(line, f, err)
			}
			row.ids, row.vals[f] = ids, ""
		case len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')):
			row.vals[f] = string(raw)
		default:
			return traceRow{}, tb.fail(line, f, fmt.Errorf("want a number or a string, got %s", clip(string(raw))))
		}
	}
	return row, nil
}

// jsonHashIDs reads a JSON array of non-negative integer ids.
func jsonHashIDs(raw []byte) ([]int64, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, fmt.Errorf("want an array of integer ids: %w", err)
	}
	if len(nums) > TraceHashIDsMax {
		return nil, fmt.Errorf("more than %d ids", TraceHashIDsMax)
	}
	ids := make([]int64, len(nums))
	for i, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 {
			return nil, fmt.Errorf("want non-negative integer ids, got %q", clip(n.String()))
		}
		ids[i] = v
	}
	return ids, nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

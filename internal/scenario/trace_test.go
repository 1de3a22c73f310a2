package scenario

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
)

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes()
}

func TestReadTrace(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name  string
		file  string
		input []byte
		want  []TraceRecord
	}{
		{name: "azure", file: "AzureLLMInferenceTrace_code.csv", input: []byte(
			"TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:17:03.9799600,4808,10\n" +
				"2023-11-16 18:17:04.0319600,3180,8\n" +
				"2023-11-16 18:17:05.9799600,1,0\n"),
			want: []TraceRecord{{At: 0, InputTokens: 4808, OutputTokens: 10},
				{At: 52 * ms, InputTokens: 3180, OutputTokens: 8}, {At: 2 * time.Second, InputTokens: 1}}},
		{name: "generic seconds, class, max_tokens, unsorted, case-insensitive", file: "t.csv", input: []byte(
			"Timestamp,INPUT_TOKENS,output_tokens,Class,max_tokens,extra\n" +
				"2.5,100,20,high,1024,x\n" +
				"0.25,200,30,,,y\n" +
				"2.5,300,40,0,,z\n"),
			want: []TraceRecord{{At: 250 * ms, InputTokens: 200, OutputTokens: 30},
				{At: 2500 * ms, InputTokens: 100, OutputTokens: 20, MaxTokens: 1024, Class: llm.High, ClassSet: true},
				{At: 2500 * ms, InputTokens: 300, OutputTokens: 40, Class: llm.Critical, ClassSet: true}}},
		{name: "generic ms with hash id runs, offsets kept", file: "t.csv", input: []byte(
			"timestamp_ms,input_tokens,output_tokens,hash_ids\n3000,5,6,0 14-16\n4000,7,8,\n"),
			want: []TraceRecord{{At: 3 * time.Second, InputTokens: 5, OutputTokens: 6, HashIDs: []int64{0, 14, 15, 16}},
				{At: 4 * time.Second, InputTokens: 7, OutputTokens: 8}}},
		{name: "unix seconds are rebased", file: "t.csv", input: []byte(
			"timestamp,input_tokens,output_tokens\n1700000001.5,1,2\n1700000000,3,4\n"),
			want: []TraceRecord{{At: 0, InputTokens: 3, OutputTokens: 4}, {At: 1500 * ms, InputTokens: 1, OutputTokens: 2}}},
		{name: "mooncake jsonl", file: "conversation_trace.jsonl", input: []byte(
			`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}` + "\n\n" +
				`{"timestamp": 3000, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14]}` + "\n"),
			want: []TraceRecord{{At: 0, InputTokens: 6758, OutputTokens: 500, HashIDs: []int64{0, 1, 2}},
				{At: 3 * time.Second, InputTokens: 7322, OutputTokens: 490, HashIDs: []int64{0, 14}}}},
		{name: "generic jsonl in seconds, sniffed", file: "stdin", input: []byte(
			` {"Timestamp": 1.5, "input_tokens": 10, "output_tokens": 1.2e1, "class": "low", "max_tokens": 64, "hash_ids": "3-4"}` + "\n" +
				`{"timestamp_ms": 500, "input_tokens": 1, "output_tokens": 2, "class": 1, "ignored": {"a": 1}, "max_tokens": null}`),
			want: []TraceRecord{{At: 500 * ms, InputTokens: 1, OutputTokens: 2, Class: llm.High, ClassSet: true},
				{At: 1500 * ms, InputTokens: 10, OutputTokens: 12, MaxTokens: 64, Class: llm.Low, ClassSet: true, HashIDs: []int64{3, 4}}}},
		{name: "gzipped csv", file: "code.csv.gz", input: gz(t, "timestamp,input_tokens,output_tokens\n1,2,3\n"),
			want: []TraceRecord{{At: time.Second, InputTokens: 2, OutputTokens: 3}}},
		{name: "gzipped jsonl, sniffed whatever the name", file: "trace.gz", input: gz(t, `{"timestamp_ms":1,"input_tokens":2,"output_tokens":3}`),
			want: []TraceRecord{{At: ms, InputTokens: 2, OutputTokens: 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := ReadTrace(tc.file, bytes.NewReader(tc.input))
			require.NoError(t, err)
			require.Equal(t, tc.file, tr.Name)
			require.Equal(t, tc.want, tr.Records)
		})
	}
}

func TestReadTraceErrors(t *testing.T) {
	t.Parallel()
	const head = "timestamp,input_tokens,output_tokens\n"
	tests := []struct {
		name, file, input string
		line              int
		field             string
		msg               string
	}{
		{"empty", "e.csv", "", 0, "", "e.csv: empty: want a header row"},
		{"header only", "h.csv", head, 0, "", "h.csv: no records"},
		{"no input column", "a.csv", "timestamp,output_tokens\n1,2\n", 1, "input_tokens", "a.csv:1: input_tokens: no such column (want input_tokens, ContextTokens or input_length)"},
		{"no time column", "a.csv", "input_tokens,output_tokens\n1,2\n", 1, "timestamp", "no such column"},
		{"column twice", "a.csv", "input_tokens,ContextTokens,output_tokens,timestamp\n", 1, "input_tokens", `given twice (columns "input_tokens" and "contexttokens")`},
		{"bad output", "b.csv", head + "1,2,3\n2,3,many\n", 3, "output_tokens", `b.csv:3: output_tokens: want an integer, got "many"`},
		{"negative input", "b.csv", head + "1,-2,3\n", 2, "input_tokens", "must be in [0, 10000000], got -2"},
		{"huge input", "b.csv", head + "1,20000000,3\n", 2, "input_tokens", "must be in [0, 10000000]"},
		{"fractional tokens", "b.csv", head + "1,2.5,3\n", 2, "input_tokens", "want an integer"},
		{"missing output", "b.csv", head + "1,2,\n", 2, "output_tokens", "missing"},
		{"bad class", "c.csv", "timestamp,input_tokens,output_tokens,class\n1,2,3,urgent\n", 2, "class", "urgent"},
		{"zero max_tokens", "c.csv", "timestamp,input_tokens,output_tokens,max_tokens\n1,2,3,0\n", 2, "max_tokens", "must be in [1,"},
		{"negative time", "d.csv", head + "-1,2,3\n", 2, "timestamp", "must be a number of seconds"},
		{"nan time", "d.csv", head + "NaN,2,3\n", 2, "timestamp", "must be a number of seconds"},
		{"garbage time", "d.csv", head + "yesterday,2,3\n", 2, "timestamp", "want seconds or a date-time"},
		{"mixed times", "d.csv", head + "2023-11-16 18:17:03,2,3\n5,2,3\n", 3, "timestamp", "mixes date-times and numbers"},
		{"bad ms", "d.csv", "timestamp_ms,input_tokens,output_tokens\n2023-11-16,2,3\n", 2, "timestamp_ms", "want milliseconds"},
		{"field count", "f.csv", head + "1,2,3\n1,2\n", 3, "", "wrong number of fields"},
		{"bad hash run", "g.csv", "timestamp,input_tokens,output_tokens,hash_ids\n1,2,3,5-4\n", 2, "hash_ids", "a <= b"},
		{"too many hash ids", "g.csv", "timestamp,input_tokens,output_tokens,hash_ids\n1,2,3,0-99999999\n", 2, "hash_ids", "more than 65536 ids"},
		{"jsonl not an object", "j.jsonl", `{"timestamp":1,"input_tokens":2,"output_tokens":3}` + "\n[1]\n", 2, "", "j.jsonl:2: want a JSON object"},
		{"jsonl null", "j.jsonl", "null\n", 1, "", "want a JSON object"},
		{"jsonl bool", "j.jsonl", `{"timestamp":1,"input_tokens":true,"output_tokens":3}`, 1, "input_tokens", "want a number or a string, got true"},
		{"jsonl missing time", "j.jsonl", `{"input_tokens":2,"output_tokens":3}`, 1, "timestamp", "missing"},
		{"jsonl twice", "j.jsonl", `{"timestamp":1,"input_tokens":2,"input_length":2,"output_tokens":3}`, 1, "input_tokens", "given twice"},
		{"jsonl bad ids", "j.jsonl", `{"timestamp":1,"input_tokens":2,"output_tokens":3,"hash_ids":[1,-2]}`, 1, "hash_ids", "non-negative integer ids"},
		{"jsonl ids not numbers", "j.jsonl", `{"timestamp":1,"input_tokens":2,"output_tokens":3,"hash_ids":["a"]}`, 1, "hash_ids", "want an array of integer ids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadTrace(tc.file, strings.NewReader(tc.input))
			require.Error(t, err)
			te, ok := errors.AsType[*TraceError](err)
			require.True(t, ok, "%T %v", err, err)
			require.Equal(t, tc.file, te.File)
			require.Equal(t, tc.line, te.Line, err.Error())
			require.Equal(t, tc.field, te.Field, err.Error())
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	_, err := ReadTrace("bad.gz", bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}))
	require.ErrorContains(t, err, "bad.gz: opening gzip")
	_, err = ReadTrace("cut.csv.gz", bytes.NewReader(gz(t, head+"1,2,3\n")[:30]))
	require.ErrorContains(t, err, "cut.csv.gz")
}

// checkTrace holds for every trace a parser returns.
func checkTrace(t *testing.T, tr *Trace) {
	require.NotEmpty(t, tr.Records)
	for i, r := range tr.Records {
		require.GreaterOrEqual(t, r.At, time.Duration(0))
		if i > 0 {
			require.GreaterOrEqual(t, r.At, tr.Records[i-1].At)
		}
		for _, v := range []int{r.InputTokens, r.OutputTokens, r.MaxTokens} {
			require.GreaterOrEqual(t, v, 0)
			require.LessOrEqual(t, v, TraceTokensMax)
		}
		require.True(t, !r.ClassSet || r.Class.Valid())
		require.LessOrEqual(t, len(r.HashIDs), TraceHashIDsMax)
	}
}

func FuzzParseTraceCSV(f *testing.F) {
	for _, s := range []string{
		"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n",
		"timestamp,input_tokens,output_tokens,class,max_tokens,hash_ids\n2.5,100,20,high,1024,0 1-3\n0.25,200,30,,,\n",
		"timestamp_ms,input_tokens,output_tokens\n1700000000000,1,2\n", "a,b\n1,2\n", "", "\"", "timestamp,input_tokens,output_tokens\n9e99,1,1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseTraceCSV("fuzz.csv", bytes.NewReader(data))
		if err != nil {
			_, ok := errors.AsType[*TraceError](err)
			require.True(t, ok, "%T %v", err, err)
			return
		}
		checkTrace(t, tr)
	})
}

func FuzzParseTraceJSONL(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}`,
		`{"timestamp": 1.5, "input_tokens": 10, "output_tokens": 12, "class": "low", "max_tokens": 64, "hash_ids": "3-4"}` + "\n" + `{"timestamp_ms": 500, "input_tokens": 1, "output_tokens": 2}`,
		`{"TIMESTAMP": "2023-11-16 18:17:03.9799600", "ContextTokens": 1, "GeneratedTokens": 2}`,
		"null", "[]", `{"timestamp":1e400}`, `{"hash_ids":[1e30]}`, "{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseTraceJSONL("fuzz.jsonl", bytes.NewReader(data))
		if err != nil {
			_, ok := errors.AsType[*TraceError](err)
			require.True(t, ok, "%T %v", err, err)
			return
		}
		checkTrace(t, tr)
	})
}

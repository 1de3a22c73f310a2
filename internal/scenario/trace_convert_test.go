package scenario

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConvertTraces writes the built-in traces (traces/*.csv.gz) from the
// public raw files when SLUICE_TRACE_RAW names the folder holding them
// (AzureLLMInferenceTrace_code.csv, AzureLLMInferenceTrace_conv.csv and
// Mooncake's conversation_trace.jsonl); otherwise it is skipped. It reads
// them with the package's own parsers, so what is shipped is what those
// parsers understood. traces/README.md has the command.
func TestConvertTraces(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("SLUICE_TRACE_RAW")
	if dir == "" {
		t.Skip("set SLUICE_TRACE_RAW to the folder of the raw traces to regenerate traces/*.csv.gz")
	}
	// The two Azure services share one clock: offsets count from the
	// earlier of their first requests, so replaying both keeps them aligned.
	code := filepath.Join(dir, "AzureLLMInferenceTrace_code.csv")
	conv := filepath.Join(dir, "AzureLLMInferenceTrace_conv.csv")
	codeStart, convStart := firstDateTime(t, code), firstDateTime(t, conv)
	epoch := min(codeStart, convStart)
	for _, c := range []struct {
		raw, out string
		shift    time.Duration
	}{
		{code, "azure-code.csv.gz", time.Duration(codeStart - epoch)},
		{conv, "azure-conv.csv.gz", time.Duration(convStart - epoch)},
		{filepath.Join(dir, "conversation_trace.jsonl"), "mooncake-conv.csv.gz", 0},
	} {
		f, err := os.Open(c.raw)
		require.NoError(t, err)
		tr, err := ReadTrace(c.raw, f)
		require.NoError(t, f.Close())
		require.NoError(t, err)
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		require.NoError(t, err)
		w := bufio.NewWriter(zw)
		withIDs := tr.Records[0].HashIDs != nil
		head := "timestamp_ms,input_tokens,output_tokens"
		if withIDs {
			head += ",hash_ids"
		}
		fmt.Fprintln(w, head)
		for _, r := range tr.Records {
			fmt.Fprintf(w, "%d,%d,%d", (r.At+c.shift+time.Millisecond/2)/time.Millisecond, r.InputTokens, r.OutputTokens)
			if withIDs {
				fmt.Fprintf(w, ",%s", formatHashIDs(r.HashIDs))
			}
			fmt.Fprintln(w)
		}
		require.NoError(t, w.Flush())
		require.NoError(t, zw.Close())
		require.Less(t, buf.Len(), 1<<20, "a shipped trace stays well under 1 MB")
		require.NoError(t, os.WriteFile(filepath.Join("traces", c.out), buf.Bytes(), 0o644))
		back, err := ReadTrace(c.out, bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		require.Len(t, back.Records, len(tr.Records))
		for i, r := range back.Records {
			require.Equal(t, tr.Records[i].HashIDs, r.HashIDs)
		}
		t.Logf("%s: %d records, %d bytes", c.out, len(tr.Records), buf.Len())
	}
}

// firstDateTime is the earliest TIMESTAMP of an Azure CSV, in nanoseconds
// since the Unix epoch.
func firstDateTime(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, "TIMESTAMP", rows[0][0])
	var first int64
	for i, row := range rows[1:] {
		ts, err := parseDateTime(row[0])
		require.NoError(t, err)
		if i == 0 || ts.UnixNano() < first {
			first = ts.UnixNano()
		}
	}
	return first
}

// formatHashIDs writes ids as parseHashIDs reads them: runs of
// consecutive ids as "a-b", separated by spaces.
func formatHashIDs(ids []int64) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(ids[i], 10))
		if j > i {
			b.WriteString("-" + strconv.FormatInt(ids[j], 10))
		}
		i = j + 1
	}
	return b.String()
}

func TestFormatHashIDs(t *testing.T) {
	t.Parallel()
	for _, ids := range [][]int64{nil, {0}, {0, 14, 15, 16}, {5, 4, 3}, {1, 2, 4, 5, 7}} {
		s := formatHashIDs(ids)
		back, err := parseHashIDs(s)
		require.NoError(t, err)
		if len(ids) == 0 {
			require.Empty(t, back)
			continue
		}
		require.Equal(t, ids, back, s)
	}
	require.Equal(t, "0 14-16", formatHashIDs([]int64{0, 14, 15, 16}))
}

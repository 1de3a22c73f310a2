package frontdoor

import (
	"bytes"
	"context"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// FuzzStreamBodyCut: whatever bytes an upstream sent before breaking off,
// and however they were split into reads, the reader gets a prefix of them
// that ends at an event boundary (nothing, or whole events), then exactly
// one error event, then io.EOF.
func FuzzStreamBodyCut(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {\"ty"), uint8(3))
	f.Add([]byte("data: {}\r\n\r\ndata: x\r\rdata: half"), uint8(1))
	f.Add([]byte(""), uint8(0))
	f.Add([]byte("\n\n\n\n"), uint8(7))
	f.Fuzz(func(t *testing.T, upstream []byte, split uint8) {
		for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
			var inner io.Reader = bytes.NewReader(upstream)
			if split%2 == 1 {
				inner = iotest.OneByteReader(inner)
			}
			inner = io.MultiReader(inner, iotest.ErrReader(io.ErrUnexpectedEOF))
			s := newStreamBody(context.Background(), p, io.NopCloser(inner), func() (dispatch.End, bool) { return dispatch.End{}, true })
			got, err := io.ReadAll(s)
			require.NoError(t, err)
			event := provider.StreamErrorEvent(p, "", msgStreamInterrupted)
			require.True(t, bytes.HasSuffix(got, event), "ends with the error event: %q", got)
			passed := got[:len(got)-len(event)]
			require.True(t, bytes.HasPrefix(upstream, passed), "a prefix of what the upstream sent")
			require.True(t, len(passed) == 0 || lastEventEnd(passed) == len(passed), "whole events only: %q", passed)
			n, err := s.Read(make([]byte, 8))
			require.Zero(t, n)
			require.ErrorIs(t, err, io.EOF)
		}
	})
}

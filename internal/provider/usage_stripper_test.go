package provider_test

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/provider"
)

func TestUsageStripper(t *testing.T) {
	t.Parallel()
	const (
		content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
		usage   = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"
		done    = "data: [DONE]\n\n"
	)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"strips usage chunk", content + usage + done, content + done},
		{"crlf framing", strings.ReplaceAll(content+usage+done, "\n", "\r\n"), strings.ReplaceAll(content+done, "\n", "\r\n")},
		{"keeps usage with choices", "data: {\"choices\":[{}],\"usage\":{\"x\":1}}\n\n", "data: {\"choices\":[{}],\"usage\":{\"x\":1}}\n\n"},
		{"keeps null usage", "data: {\"choices\":[],\"usage\":null}\n\n", "data: {\"choices\":[],\"usage\":null}\n\n"},
		{"keeps error event", "data: {\"error\":{\"message\":\"usage\"}}\n\n", "data: {\"error\":{\"message\":\"usage\"}}\n\n"},
		{"truncated tail kept", content + "data: {\"choi", content + "data: {\"choi"},
		{"comments kept", ": ping\n\n" + usage, ": ping\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := io.ReadAll(provider.NewUsageStripper(iotest.OneByteReader(strings.NewReader(tc.in))))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

func TestUsageStripperPassesErrors(t *testing.T) {
	t.Parallel()
	_, err := io.ReadAll(provider.NewUsageStripper(io.MultiReader(strings.NewReader("data: 1\n\n"), iotest.ErrReader(io.ErrUnexpectedEOF))))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// FuzzUsageStripper: any stream comes out as the input minus whole usage
// events, never more and never reordered.
func FuzzUsageStripper(f *testing.F) {
	f.Add("data: {\"choices\":[],\"usage\":{\"a\":1}}\n\ndata: [DONE]\n\n")
	f.Add("data: x\r\n\r\n")
	f.Add("\n\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := io.ReadAll(provider.NewUsageStripper(strings.NewReader(in)))
		require.NoError(t, err)
		require.LessOrEqual(t, len(got), len(in))
		if !strings.Contains(in, `"usage"`) {
			require.Equal(t, in, string(got))
		}
	})
}

package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithServiceTier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"model":"m","messages":[]}`, `{"service_tier":"flex","model":"m","messages":[]}`},
		{" \n{ \"model\":\"m\"}", `{"service_tier":"flex","model":"m"}`},
		{`{}`, `{"service_tier":"flex"}`},
		{`{ }`, `{"service_tier":"flex"}`},
		{`[1]`, ``},
		{``, ``},
	} {
		require.Equal(t, tc.want, string(withServiceTier([]byte(tc.in), "flex")), tc.in)
	}
}

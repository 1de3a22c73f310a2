package flow_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

func TestParsePriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want flow.Priority
		err  bool
	}{
		{"critical", flow.Critical, false}, {" HIGH ", flow.High, false}, {"normal", flow.Normal, false},
		{"low", flow.Low, false}, {"0", flow.Critical, false}, {"3", flow.Low, false},
		{"4", 0, true}, {"-1", 0, true}, {"urgent", 0, true}, {"", 0, true},
	}
	for _, tt := range tests {
		got, err := flow.ParsePriority(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got)
		b, err := got.MarshalText()
		require.NoError(t, err)
		var back flow.Priority
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, got, back)
	}
}

// FuzzParsePriority checks the X-Priority parser never panics and only
// ever returns a valid class that round-trips through its name.
func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"critical", "high", "normal", "low", "0", "3", "4", "-1", " Low ", "", "\x00", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := flow.ParsePriority(s)
		if err != nil {
			return
		}
		if !p.Valid() {
			t.Fatalf("ParsePriority(%q) = %d, not a valid class", s, p)
		}
		again, err := flow.ParsePriority(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}

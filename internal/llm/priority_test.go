package llm_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/stretchr/testify/require"
)

func TestParsePriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want llm.Priority
		err  bool
	}{
		{"critical", llm.Critical, false}, {" HIGH ", llm.High, false}, {"normal", llm.Normal, false},
		{"low", llm.Low, false}, {"0", llm.Critical, false}, {"3", llm.Low, false},
		{"4", 0, true}, {"-1", 0, true}, {"urgent", 0, true}, {"", 0, true},
	}
	for _, tt := range tests {
		got, err := llm.ParsePriority(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got)
		b, err := got.MarshalText()
		require.NoError(t, err)
		var back llm.Priority
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
		p, err := llm.ParsePriority(s)
		if err != nil {
			return
		}
		if !p.Valid() {
			t.Fatalf("ParsePriority(%q) = %d, not a valid class", s, p)
		}
		again, err := llm.ParsePriority(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}

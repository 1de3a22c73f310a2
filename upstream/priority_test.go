package upstream_test

import (
	"testing"

	"github.com/sluicehq/sluice/upstream"
	"github.com/stretchr/testify/require"
)

func TestParsePriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want upstream.Priority
		err  bool
	}{
		{"critical", upstream.Critical, false}, {" HIGH ", upstream.High, false}, {"normal", upstream.Normal, false},
		{"low", upstream.Low, false}, {"0", upstream.Critical, false}, {"3", upstream.Low, false},
		{"4", 0, true}, {"-1", 0, true}, {"urgent", 0, true}, {"", 0, true},
	}
	for _, tt := range tests {
		got, err := upstream.ParsePriority(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got)
		b, err := got.MarshalText()
		require.NoError(t, err)
		var back upstream.Priority
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
		p, err := upstream.ParsePriority(s)
		if err != nil {
			return
		}
		if !p.Valid() {
			t.Fatalf("ParsePriority(%q) = %d, not a valid class", s, p)
		}
		again, err := upstream.ParsePriority(p.String())
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}

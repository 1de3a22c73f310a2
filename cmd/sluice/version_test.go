package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionLine: the -X stamp wins field by field, and what it leaves
// empty comes from the build info (module version, VCS revision and time).
func TestVersionLine(t *testing.T) {
	t.Parallel()
	platform := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-01T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	tests := []struct {
		name                  string
		stampV, stampC, stamp string
		bi                    *debug.BuildInfo
		want                  string
	}{
		{"stamped", "v1.2.3", "fedcba9876543210fedcba9876543210fedcba98", "2026-11-02T08:00:00Z", vcs,
			"sluice v1.2.3 (commit fedcba987654, 2026-11-02T08:00:00Z, " + platform + ")"},
		{"version only stamped: the rest from vcs", "v1.2.3", "", "", vcs,
			"sluice v1.2.3 (commit 0123456789ab+dirty, 2026-11-01T12:00:00Z, " + platform + ")"},
		{"unstamped checkout", "", "", "", vcs,
			"sluice devel (commit 0123456789ab+dirty, 2026-11-01T12:00:00Z, " + platform + ")"},
		{"go install of a tag", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}},
			"sluice v1.4.0 (" + platform + ")"},
		{"nothing known", "", "", "", nil, "sluice devel (" + platform + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, resolveBuild(tt.stampV, tt.stampC, tt.stamp, tt.bi).String())
		})
	}
}

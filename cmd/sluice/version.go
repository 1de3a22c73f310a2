package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// The build's stamp, set by release builds (deploy/build.sh) with
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// Each one left empty is read from the binary's build info instead: the
// module version (go install …@v1.2.3) and the VCS revision and commit
// time that go build records in a checkout.
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what `sluice --version` reports.
type buildInfo struct {
	Version string // "v1.2.3", or "devel" when neither stamped nor a module version
	Commit  string // the VCS revision, "+dirty" appended for a modified tree; "" when unknown
	Date    string // the commit's (or the stamped build's) time; "" when unknown
	Go      string // runtime.Version()
	OS      string
	Arch    string
}

// currentBuild returns this binary's buildInfo.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(version, commit, date, bi)
}

// resolveBuild merges the -X stamp with the build info: a stamped field
// wins, an empty one falls back to bi (which may be nil).
func resolveBuild(stampVersion, stampCommit, stampDate string, bi *debug.BuildInfo) buildInfo {
	var modVersion, rev, at string
	dirty := false
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			modVersion = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if rev != "" && dirty {
		rev += "+dirty"
	}
	return buildInfo{
		Version: cmp.Or(stampVersion, modVersion, "devel"),
		Commit:  cmp.Or(stampCommit, rev),
		Date:    cmp.Or(stampDate, at),
		Go:      runtime.Version(),
		OS:      runtime.GOOS,
		Arch:    runtime.GOARCH,
	}
}

// String is the line `sluice --version` prints:
//
//	sluice v1.2.3 (commit 0123456789ab, 2026-11-01T12:00:00Z, go1.26.8 linux/amd64)
//
// with the commit abbreviated to 12 characters, and the commit or the date
// left out when unknown.
func (b buildInfo) String() string {
	parts := make([]string, 0, 3)
	if b.Commit != "" {
		c, dirty := strings.CutSuffix(b.Commit, "+dirty")
		c = c[:min(len(c), 12)]
		if dirty {
			c += "+dirty"
		}
		parts = append(parts, "commit "+c)
	}
	if b.Date != "" {
		parts = append(parts, b.Date)
	}
	parts = append(parts, fmt.Sprintf("%s %s/%s", b.Go, b.OS, b.Arch))
	return "sluice " + b.Version + " (" + strings.Join(parts, ", ") + ")"
}

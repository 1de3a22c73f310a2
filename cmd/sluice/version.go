package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// without it the module version (or "devel" and the VCS revision) is used.
var version = ""

// versionLine is what `sluice --version` prints: the version, the VCS
// revision and time when the binary was built from a checkout, and the Go
// version.
func versionLine() string {
	v, rev, at, dirty := version, "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
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
	if v == "" {
		v = "devel"
	}
	line := "sluice " + v
	if rev != "" {
		line += fmt.Sprintf(" (%.12s", rev)
		if dirty {
			line += "+dirty"
		}
		if at != "" {
			line += " " + at
		}
		line += ")"
	}
	return line + " " + runtime.Version()
}

//go:build !unix

package scenario

import "time"

// processCPU is not measured on this platform: it reports 0.
func processCPU() time.Duration { return 0 }

package membudget

import (
	"bufio"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// SystemMemory returns the memory the process may use: the cgroup's
// memory.max when it sets a limit, else the machine's MemTotal; false when
// neither can be read.
func SystemMemory() (int64, bool) {
	cgroup, _ := os.ReadFile("/sys/fs/cgroup/memory.max")
	meminfo, _ := os.ReadFile("/proc/meminfo")
	return memoryFrom(string(cgroup), string(meminfo))
}

// memoryFrom is SystemMemory on the contents of /sys/fs/cgroup/memory.max
// and /proc/meminfo (either may be empty): a cgroup limit wins when it is a
// number smaller than MemTotal.
func memoryFrom(cgroupMax, meminfo string) (int64, bool) {
	total, haveTotal := memTotal(meminfo)
	if v, err := strconv.ParseInt(strings.TrimSpace(cgroupMax), 10, 64); err == nil && v > 0 {
		if !haveTotal || v < total {
			return v, true
		}
	}
	return total, haveTotal
}

// memTotal reads the MemTotal line ("MemTotal:  24684096 kB").
func memTotal(meminfo string) (int64, bool) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || v <= 0 || v > math.MaxInt64/1024 {
			return 0, false
		}
		if len(fields) > 1 && strings.EqualFold(fields[1], "kB") {
			v *= 1024
		}
		return v, true
	}
	return 0, false
}

// DefaultRequestBytes is the default limit of request bytes in flight:
// half of the Go runtime's memory limit (GOMEMLIMIT, or the limit sluice
// serve sets) when there is one, else a quarter of SystemMemory, else
// unknown; never below floor.
func DefaultRequestBytes(unknown, floor int64) int64 {
	mem, ok := SystemMemory()
	return defaultRequestBytes(debug.SetMemoryLimit(-1), mem, ok, unknown, floor)
}

func defaultRequestBytes(goLimit, mem int64, haveMem bool, unknown, floor int64) int64 {
	switch {
	case goLimit > 0 && goLimit < math.MaxInt64:
		return max(goLimit/2, floor)
	case haveMem:
		return max(mem/4, floor)
	}
	return max(unknown, floor)
}

// DefaultMemoryLimitPercent is the share of SystemMemory that sluice serve
// gives the Go runtime as its soft memory limit when GOMEMLIMIT is unset.
const DefaultMemoryLimitPercent = 75

// DefaultMemoryLimit is the soft memory limit sluice serve sets when the
// environment does not set GOMEMLIMIT: DefaultMemoryLimitPercent of
// SystemMemory; false when the memory cannot be read.
func DefaultMemoryLimit() (int64, bool) {
	mem, ok := SystemMemory()
	if !ok {
		return 0, false
	}
	return mem / 100 * DefaultMemoryLimitPercent, true
}

package upstream

import (
	"fmt"
	"strconv"
	"strings"
)

// Priority is a scheduling class (a *class* always means a priority class):
// the key of Classes. Lower values are more urgent.
type Priority int

// The four priority classes, from the X-Priority header's names or 0–3.
const (
	Critical Priority = iota
	High
	Normal
	Low
)

// NumPriorities is how many classes there are.
const NumPriorities = 4

var priorityNames = [NumPriorities]string{"critical", "high", "normal", "low"}

func (p Priority) String() string {
	if p < 0 || p >= NumPriorities {
		return fmt.Sprintf("priority(%d)", int(p))
	}
	return priorityNames[p]
}

// Valid reports whether p is one of the four classes.
func (p Priority) Valid() bool { return p >= 0 && p < NumPriorities }

// ParsePriority reads a class name (case-insensitive) or a digit 0–3
// (0 = critical).
func ParsePriority(s string) (Priority, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	for i, n := range priorityNames {
		if v == n {
			return Priority(i), nil
		}
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < NumPriorities {
		return Priority(n), nil
	}
	return 0, fmt.Errorf("unknown priority %q (want critical, high, normal, low or 0-3)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("invalid priority %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler (YAML, JSON).
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

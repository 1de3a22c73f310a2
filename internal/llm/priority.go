package llm

import "github.com/sluicehq/sluice/upstream"

// Priority is a scheduling class; lower values are more urgent. It is the
// public upstream.Priority, defined there once: the user's config and
// every package of the engine name the same type.
type Priority = upstream.Priority

// The four priority classes, from the X-Priority header's names or 0–3.
const (
	Critical = upstream.Critical
	High     = upstream.High
	Normal   = upstream.Normal
	Low      = upstream.Low
)

// NumPriorities is how many classes there are.
const NumPriorities = upstream.NumPriorities

// ParsePriority reads a class name (case-insensitive) or a digit 0–3
// (0 = critical).
func ParsePriority(s string) (Priority, error) { return upstream.ParsePriority(s) }

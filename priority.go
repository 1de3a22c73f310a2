package sluice

import "github.com/sluicehq/sluice/internal/llm"

// Priority is a request's scheduling class. Under saturation the classes
// share the upstream by their weights (8:4:2:1 by default), and a class
// waits at most its MaxWait.
type Priority int

// The priority classes, most urgent first.
const (
	Critical Priority = Priority(llm.Critical)
	High     Priority = Priority(llm.High)
	Normal   Priority = Priority(llm.Normal)
	Low      Priority = Priority(llm.Low)
)

// String returns the class's name: critical, high, normal or low.
func (p Priority) String() string { return llm.Priority(p).String() }

// ParsePriority returns the class named s: critical, high, normal, low, or
// 0-3 (case-insensitive), or an error.
func ParsePriority(s string) (Priority, error) {
	p, err := llm.ParsePriority(s)
	return Priority(p), err
}

package frontdoor

import (
	"context"

	"github.com/sluicehq/sluice/internal/llm"
)

type ctxKey int

const (
	priorityKey ctxKey = iota
	clientKey
)

// WithPriority returns ctx carrying priority p for requests sent through a
// Transport. It takes precedence over the X-Priority header.
func WithPriority(ctx context.Context, p llm.Priority) context.Context {
	return context.WithValue(ctx, priorityKey, p)
}

// WithClient returns ctx naming the client for fairness inside a class. It
// takes precedence over the X-Sluice-Client header.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey, client)
}

// overrideFrom reads the values WithPriority and WithClient put in ctx.
func overrideFrom(ctx context.Context) Override {
	var o Override
	if p, ok := ctx.Value(priorityKey).(llm.Priority); ok && p.Valid() {
		o.Priority = &p
	}
	o.Client, _ = ctx.Value(clientKey).(string)
	return o
}

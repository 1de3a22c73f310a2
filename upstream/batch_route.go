package upstream

import (
	"cmp"
	"fmt"
	"time"
)

// Defaults of BatchRoute (docs/config.md, "batch").
const (
	// BatchMaxWaitDefault is how long a routed job may wait for its group
	// to fill.
	BatchMaxWaitDefault = 30 * time.Minute
	// BatchMinTimeLeftDefault is the least time before its deadline a job
	// must have to be routed.
	BatchMinTimeLeftDefault = 2 * time.Hour
	// BatchDeadlineMarginDefault is how long before its deadline a routed
	// job still in a running provider batch is pulled back.
	BatchDeadlineMarginDefault = 15 * time.Minute
	// BatchMinGroupDefault is how many routed jobs make a group without
	// waiting for max_wait.
	BatchMinGroupDefault = 100
	// BatchMaxRequestsDefault and BatchMaxBytesDefault bound one provider
	// batch: the smaller of Anthropic's (100,000 requests, 256 MB) and
	// OpenAI's (50,000 requests, 200 MB) limits.
	BatchMaxRequestsDefault = 50_000
	BatchMaxBytesDefault    = 200 << 20
	// BatchPollIntervalDefault is how often running provider batches are
	// polled and the queue is looked at for new groups.
	BatchPollIntervalDefault = time.Minute
	// BatchRouteProvider is the one route: the provider's Batch API.
	BatchRouteProvider = "provider"
)

// BatchRoute routes the jobs of some classes to the provider's Batch API
// (half price, results within 24 hours) when their deadline leaves room
// (docs/jobs-api.md, "Routing to the provider's Batch API"). Live requests
// are never routed. The zero value routes nothing.
type BatchRoute struct {
	// Route is "provider" to route, empty for none. Defaults to none.
	Route string `yaml:"route"`
	// Classes are the priority classes routed (critical, high, normal,
	// low). Required with route.
	Classes []string `yaml:"classes"`
	// MaxWait is how long a job may wait for its group to fill before the
	// group is sent as it is. Defaults to 30m.
	MaxWait time.Duration `yaml:"max_wait"`
	// MinTimeLeft is the least time before its deadline a job needs to be
	// routed (a job without a deadline always has it); nearer jobs run on
	// the synchronous path. At least deadline_margin + max_wait. Defaults
	// to 2h.
	MinTimeLeft time.Duration `yaml:"min_time_left"`
	// DeadlineMargin is how long before its deadline a job whose provider
	// batch is still running is pulled back: the batch is canceled at the
	// provider, and the job runs on the synchronous path. Defaults to 15m.
	DeadlineMargin time.Duration `yaml:"deadline_margin"`
	// MinGroup is how many waiting jobs make a group at once. Defaults to
	// 100.
	MinGroup int `yaml:"min_group"`
	// MaxRequests bounds the requests of one provider batch. Defaults to
	// 50000.
	MaxRequests int `yaml:"max_requests"`
	// MaxBytes bounds the bytes of one provider batch as the provider
	// receives it: the create's body on Anthropic, the input file on
	// OpenAI, each request's line around its body included. Defaults to
	// 200 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// PollInterval is how often running batches are polled and the queue
	// looked at for new groups. Defaults to 1m.
	PollInterval time.Duration `yaml:"poll_interval"`
}

// Enabled reports whether b routes anything.
func (b BatchRoute) Enabled() bool { return b.Route == BatchRouteProvider }

// WithDefaults returns b with its zero fields defaulted (nothing when it
// routes nothing).
func (b BatchRoute) WithDefaults() BatchRoute {
	if !b.Enabled() {
		return b
	}
	b.MaxWait = cmp.Or(b.MaxWait, BatchMaxWaitDefault)
	b.DeadlineMargin = cmp.Or(b.DeadlineMargin, BatchDeadlineMarginDefault)
	b.MinTimeLeft = cmp.Or(b.MinTimeLeft, max(BatchMinTimeLeftDefault, b.MaxWait+b.DeadlineMargin))
	b.MinGroup = cmp.Or(b.MinGroup, BatchMinGroupDefault)
	b.MaxRequests = cmp.Or(b.MaxRequests, BatchMaxRequestsDefault)
	b.MaxBytes = cmp.Or(b.MaxBytes, BatchMaxBytesDefault)
	b.PollInterval = cmp.Or(b.PollInterval, BatchPollIntervalDefault)
	return b
}

// RoutedClasses are the classes routed, parsed (valid after Validate).
func (b BatchRoute) RoutedClasses() []Priority {
	var out []Priority
	for _, c := range b.Classes {
		if p, err := ParsePriority(c); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// validate reports the first invalid field, named by its path under batch.
func (b BatchRoute) validate() error {
	switch b.Route {
	case "":
		if len(b.Classes) > 0 {
			return fmt.Errorf("batch.route: required with batch.classes (route: %s)", BatchRouteProvider)
		}
		return nil
	case BatchRouteProvider:
	default:
		return fmt.Errorf("batch.route: %q is not %q", b.Route, BatchRouteProvider)
	}
	if len(b.Classes) == 0 {
		return fmt.Errorf("batch.classes: name at least one class to route (e.g. [low])")
	}
	for i, c := range b.Classes {
		if _, err := ParsePriority(c); err != nil {
			return fmt.Errorf("batch.classes[%d]: %w", i, err)
		}
	}
	d := b.WithDefaults()
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"batch.max_wait", d.MaxWait}, {"batch.deadline_margin", d.DeadlineMargin}, {"batch.min_time_left", d.MinTimeLeft},
		{"batch.poll_interval", d.PollInterval}} {
		if f.v <= 0 {
			return fmt.Errorf("%s: %v must be positive", f.name, f.v)
		}
	}
	switch {
	case d.MinTimeLeft < d.DeadlineMargin+d.MaxWait:
		return fmt.Errorf("batch.min_time_left: %v must be at least batch.deadline_margin + batch.max_wait (%v)",
			d.MinTimeLeft, d.DeadlineMargin+d.MaxWait)
	case d.MinGroup < 1:
		return fmt.Errorf("batch.min_group: %d must be at least 1", d.MinGroup)
	case d.MaxRequests < 1:
		return fmt.Errorf("batch.max_requests: %d must be at least 1", d.MaxRequests)
	case d.MinGroup > d.MaxRequests:
		return fmt.Errorf("batch.min_group: %d must be at most batch.max_requests (%d)", d.MinGroup, d.MaxRequests)
	case d.MaxBytes < 1:
		return fmt.Errorf("batch.max_bytes: %d must be at least 1", d.MaxBytes)
	}
	return nil
}

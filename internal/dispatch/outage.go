package dispatch

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// failure is the latest attempt that failed for the upstream's health
// (overload, server error, timeout, broken stream), kept to name the cause
// of an outage.
type failure struct {
	status    int
	errorType string
	message   string
	at        time.Time
}

// recordFailure remembers out when it speaks of the upstream's health.
func (d *Dispatcher) recordFailure(out llm.Outcome, now time.Time) {
	if out.Kind == llm.Rate || out.Kind == llm.Overload {
		d.fmu.Lock()
		d.noteThrottle(out, now)
		d.fmu.Unlock()
	}
	if !outageKind(&out) {
		return
	}
	d.fmu.Lock()
	d.lastFail = failure{status: out.Status, errorType: out.ErrorType, message: out.Message, at: now}
	d.fmu.Unlock()
}

func (d *Dispatcher) lastFailure() failure {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	return d.lastFail
}

// outageKind reports whether an attempt's outcome says the upstream itself
// is failing (as opposed to a rate limit, a quota or a bad request).
func outageKind(o *llm.Outcome) bool {
	if o == nil {
		return false
	}
	switch o.Kind {
	case llm.Overload, llm.Transient, llm.StreamFail:
		return true
	case llm.Success, llm.Rate, llm.Quota, llm.ClientError:
		return false
	}
	return false
}

// OutageStatus is the status Sluice answers an outage with: the protocol's
// own "overloaded" answer, which every official SDK treats as retryable
// after its retry-after (Anthropic 529 overloaded_error, OpenAI 503).
func OutageStatus(p llm.Protocol) int {
	if p == llm.OpenAI {
		return http.StatusServiceUnavailable
	}
	return 529
}

// describeOutage fills e for an outage: the overloaded status, a message
// naming the cause (the breaker's state and since when, the next probe, the
// last upstream failure; or the provider's rejection of every key and the
// next key probe) and a retry-after that points at that next probe. e.Message, when set, says what the request
// itself went through and is kept.
func (d *Dispatcher) describeOutage(e *Error, now time.Time, burnt int) {
	e.Status = OutageStatus(d.cfg.Protocol)
	st, readyAt := d.brk.State(now)
	since := d.brk.OutageSince()
	var b strings.Builder
	fmt.Fprintf(&b, "upstream %q is unavailable", d.cfg.Name)
	switch st {
	case flow.Open:
		e.OutageSince = since
		if readyAt.IsZero() { // held open by an operator
			fmt.Fprintf(&b, ": circuit breaker held open by an operator since %s", since.UTC().Format(time.RFC3339))
			e.RetryAfter = time.Minute
			break
		}
		fmt.Fprintf(&b, ": circuit breaker open since %s, next probe in %v",
			since.UTC().Format(time.RFC3339), readyAt.Sub(now).Round(time.Millisecond))
		e.RetryAfter = max(readyAt.Sub(now), time.Second)
	case flow.HalfOpen:
		e.OutageSince = since
		fmt.Fprintf(&b, ": circuit breaker half-open since an outage that began %s, probing",
			since.UTC().Format(time.RFC3339))
		e.RetryAfter = time.Second
	case flow.Closed:
		e.RetryAfter = clientRetryAfter(d.backoff.Ceiling(burnt))
		d.mu.Lock()
		out, probeAt := d.keysOut()
		cause, outSince := d.keysOutCause()
		d.mu.Unlock()
		if !out {
			break
		}
		e.OutageSince = outSince
		fmt.Fprintf(&b, ": the provider rejected every key of its pool (last: %s) since %s",
			cause, outSince.UTC().Format(time.RFC3339))
		if probeAt.IsZero() {
			b.WriteString(", a key is being probed")
			e.RetryAfter = time.Second
		} else {
			fmt.Fprintf(&b, ", next key probe in %v", max(probeAt.Sub(now), 0).Round(time.Millisecond))
			e.RetryAfter = max(probeAt.Sub(now), time.Second)
		}
		if e.Message == "" {
			e.Message = b.String()
			return
		}
	}
	if e.Message != "" {
		b.WriteString("; " + e.Message)
	} else if lf := d.lastFailure(); !lf.at.IsZero() {
		b.WriteString("; last upstream failure " + describeFailure(lf, now))
	}
	e.Message = b.String()
}

func describeFailure(f failure, now time.Time) string {
	var parts []string
	if f.status != 0 {
		parts = append(parts, fmt.Sprintf("status %d", f.status))
	}
	if f.errorType != "" {
		parts = append(parts, f.errorType)
	}
	s := strings.Join(parts, " ")
	if f.message != "" {
		if s != "" {
			s += ": "
		}
		s += f.message
	}
	return fmt.Sprintf("%s ago: %s", since(f.at, now).Round(time.Millisecond), s)
}

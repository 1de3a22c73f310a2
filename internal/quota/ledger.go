package quota

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/pricing"
)

// Window names one budget window.
type Window string

// The windows of a budget, in the order a reservation checks them (the
// first exceeded is the one reported: the one that resets last).
const (
	Total Window = "total"
	Month Window = "month"
	Day   Window = "day"
)

// Windows lists every window in check order.
var Windows = []Window{Total, Month, Day}

// Limits are a client's budgets; zero means no limit in that window.
type Limits struct {
	Day, Month, Total pricing.Amount
}

// Any reports whether any window has a limit.
func (l Limits) Any() bool { return l.Day > 0 || l.Month > 0 || l.Total > 0 }

func (l Limits) of(w Window) pricing.Amount {
	switch w {
	case Day:
		return l.Day
	case Month:
		return l.Month
	case Total:
	}
	return l.Total
}

// ExceededError is returned by Reserve when a request's worst case does
// not fit a window's budget.
type ExceededError struct {
	Client string
	Window Window
	// Limit is the window's budget; Used is what is spent and reserved in
	// it now; Need is the request's worst case.
	Limit, Used, Need pricing.Amount
	// ResetsAt is when the window starts afresh (zero for Total: never).
	ResetsAt time.Time
	// TooLarge is set when Need alone exceeds Limit: the request can never
	// fit this window, whatever the wait.
	TooLarge bool
	// Pending is set when the request would fit once the reservations in
	// flight settle (they usually cost less than their worst case): worth
	// retrying soon rather than at ResetsAt.
	Pending bool
	// Share is set (this node's share, in (0, 1)) when the budget is
	// shared by a cluster and the request does not fit this node's share
	// of it (Pending is then set too: the share grows with demand).
	Share float64
	// First is set on the first refusal in this window of this client's
	// budget since it last reset (so callers log "budget exhausted" once).
	First bool
}

func (e *ExceededError) Error() string {
	if e.TooLarge {
		return fmt.Sprintf("client %s: the request's worst-case cost %s exceeds the %s budget of %s", e.Client, e.Need, e.Window, e.Limit)
	}
	return fmt.Sprintf("client %s: %s budget of %s exhausted (%s spent or reserved, the request needs up to %s)",
		e.Client, e.Window, e.Limit, e.Used, e.Need)
}

// Hold is a reservation; settle it exactly once with Settle (a refund is
// a settlement at zero). The zero Hold reserves nothing.
type Hold struct {
	client string
	amount pricing.Amount
	valid  bool
}

// Amount is what the hold reserved.
func (h Hold) Amount() pricing.Amount { return h.amount }

// Usage is one window's state for a client.
type Usage struct {
	// Reserved is the worst case in flight: this ledger's reservations
	// and the amount held elsewhere (SetHeld).
	Spent, Reserved, Limit pricing.Amount
	// ResetsAt is the window's end (zero for Total).
	ResetsAt time.Time
}

// Remaining is Limit - Spent - Reserved, floored at 0; -1 when there is no
// limit.
func (u Usage) Remaining() pricing.Amount {
	if u.Limit <= 0 {
		return -1
	}
	return max(u.Limit-u.Spent-u.Reserved, 0)
}

// Account is a client's budget state at an instant.
type Account struct {
	Client            string
	Day, Month, Total Usage
}

// Of returns the usage of window w.
func (a Account) Of(w Window) Usage {
	switch w {
	case Day:
		return a.Day
	case Month:
		return a.Month
	case Total:
	}
	return a.Total
}

// Ledger holds every client's budget windows. The zero value is not
// usable: use NewLedger.
type Ledger struct {
	mu       sync.Mutex
	accounts map[string]*account
	visible  time.Duration // SetVisibleAfter
}

type account struct {
	limits     Limits
	dayStart   time.Time
	dayEnd     time.Time // dayStart + 1 day: roll has nothing to do before it
	monthStart time.Time
	spent      [3]pricing.Amount // by window index
	reserved   pricing.Amount    // in flight: counts in every window
	held       pricing.Amount    // in flight on other processes (SetHeld): counts like reserved
	refused    [3]refusal        // the last window a refusal was reported First in
	cluster    clusterPart       // this node's part of a budget shared by a cluster (ledger_share.go)
}

type refusal struct {
	start time.Time
	set   bool
}

func idx(w Window) int {
	switch w {
	case Day:
		return 0
	case Month:
		return 1
	case Total:
	}
	return 2
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{accounts: map[string]*account{}} }

// DayStart is the start of now's UTC day.
func DayStart(now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// MonthStart is the start of now's UTC month.
func MonthStart(now time.Time) time.Time {
	y, m, _ := now.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

func (l *Ledger) get(client string, now time.Time) *account {
	a := l.accounts[client]
	if a == nil {
		a = &account{dayStart: DayStart(now), monthStart: MonthStart(now)}
		l.accounts[client] = a
	}
	a.roll(now)
	return a
}

// roll starts the windows afresh when now is past them. Reservations in
// flight carry over: they settle in the new window.
func (a *account) roll(now time.Time) {
	if now.Before(a.dayEnd) {
		return // the common case: no time.Date on the hot path
	}
	defer func() { a.dayEnd = a.dayStart.AddDate(0, 0, 1) }()
	if d := DayStart(now); d.After(a.dayStart) {
		a.dayStart, a.spent[idx(Day)] = d, 0
	}
	if m := MonthStart(now); m.After(a.monthStart) {
		a.monthStart, a.spent[idx(Month)] = m, 0
	}
}

func (a *account) start(w Window) time.Time {
	switch w {
	case Day:
		return a.dayStart
	case Month:
		return a.monthStart
	case Total: // never starts again
	}
	return time.Time{}
}

func (a *account) resetsAt(w Window) time.Time {
	switch w {
	case Day:
		return a.dayStart.AddDate(0, 0, 1)
	case Month:
		return a.monthStart.AddDate(0, 1, 0)
	case Total: // never resets
	}
	return time.Time{}
}

// SetLimits sets client's budgets (zero Limits: none), keeping its spend.
func (l *Ledger) SetLimits(client string, lim Limits, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(client, now).limits = lim
}

// Load adds spend recorded earlier (from the store, at start) on the UTC
// day that starts at day: it counts in the total, and in the current month
// and day when it falls in them.
func (l *Ledger) Load(client string, day time.Time, amount pricing.Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	day = DayStart(day)
	a.spent[idx(Total)] += amount
	if !day.Before(a.monthStart) {
		a.spent[idx(Month)] += amount
	}
	if day.Equal(a.dayStart) {
		a.spent[idx(Day)] += amount
	}
}

// Rebase replaces client's spent amounts with the given ones (the day and
// month current at now, and the total), keeping its limits and its
// reservations in flight: a gateway sharing its store with others sets
// its windows to what all of them spent.
func (l *Ledger) Rebase(client string, day, month, total pricing.Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	a.spent[idx(Day)], a.spent[idx(Month)], a.spent[idx(Total)] = max(day, 0), max(month, 0), max(total, 0)
}

// SetHeld sets every client's held amount: the worst case of its
// requests in flight on other processes sharing the store (or left open
// there by a process that died, until they are charged), which counts in
// every window like this ledger's own reservations. A client absent from
// held holds nothing.
func (l *Ledger) SetHeld(held map[string]pricing.Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, a := range l.accounts {
		if _, ok := held[c]; !ok {
			a.held = 0
		}
	}
	for c, amount := range held {
		l.get(c, now).held = max(amount, 0)
	}
}

// Reserve reserves need for client at now. It fails with *ExceededError
// when, in some window with a limit, spent + reserved + held + need would
// exceed it; a client without limits is always granted (its reservations are
// still counted, for status).
func (l *Ledger) Reserve(client string, need pricing.Amount, now time.Time) (Hold, error) {
	need = max(need, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	for _, w := range Windows {
		limit := a.limits.of(w)
		if limit <= 0 {
			continue
		}
		used := a.spent[idx(w)] + a.reserved + a.held
		if used+need <= limit {
			continue
		}
		e := &ExceededError{Client: client, Window: w, Limit: limit, Used: used, Need: need,
			ResetsAt: a.resetsAt(w), TooLarge: need > limit, Pending: a.reserved+a.held > 0 && a.spent[idx(w)]+need <= limit}
		if r := a.refused[idx(w)]; !e.TooLarge && !e.Pending && (!r.set || !r.start.Equal(a.start(w))) {
			e.First = true
			a.refused[idx(w)] = refusal{start: a.start(w), set: true}
		}
		return Hold{}, e
	}
	if e := l.checkShare(client, a, need, now); e != nil {
		return Hold{}, e
	}
	a.reserved += need
	return Hold{client: client, amount: need, valid: true}, nil
}

// Force reserves need for client at now whatever its limits: a
// reservation for a request that was admitted and sent before this
// ledger knew of it (another process's, taken over). Settle it as
// Reserve's.
func (l *Ledger) Force(client string, need pricing.Amount, now time.Time) Hold {
	need = max(need, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(client, now).reserved += need
	return Hold{client: client, amount: need, valid: true}
}

// Settle ends h: its reservation is released and actual (what the request
// really cost; 0 for a refund) is charged to the windows current at now.
// Settling a zero Hold charges nothing.
func (l *Ledger) Settle(h Hold, actual pricing.Amount, now time.Time) {
	if !h.valid {
		return
	}
	l.Charge(h.client, actual, h.amount, now)
}

// Charge charges actual to client's windows at now and releases reserved
// from its reservations (Settle without a Hold: a request that reserved
// through another path).
func (l *Ledger) Charge(client string, actual, reserved pricing.Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	a.reserved = max(a.reserved-max(reserved, 0), 0)
	actual = max(actual, 0)
	a.cluster.pending += actual
	for i := range a.spent {
		a.spent[i] += actual
	}
}

// Account returns client's windows at now.
func (l *Ledger) Account(client string, now time.Time) Account {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.account(client, l.get(client, now))
}

func (l *Ledger) account(client string, a *account) Account {
	u := func(w Window) Usage {
		return Usage{Spent: a.spent[idx(w)], Reserved: a.reserved + a.held, Limit: a.limits.of(w), ResetsAt: a.resetsAt(w)}
	}
	return Account{Client: client, Day: u(Day), Month: u(Month), Total: u(Total)}
}

// Accounts returns every client's windows at now, in no order.
func (l *Ledger) Accounts(now time.Time) []Account {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Account, 0, len(l.accounts))
	for c := range l.accounts {
		out = append(out, l.account(c, l.get(c, now)))
	}
	return out
}

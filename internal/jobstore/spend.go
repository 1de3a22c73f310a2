package jobstore

import (
	"strings"
	"time"
)

// SpendEntry is what one client spent on one upstream and model on one
// UTC day (docs/budgets.md).
type SpendEntry struct {
	Client   string
	Upstream string
	// Model is the price table's entry that priced the requests.
	Model string
	// Day is the UTC day (its start; any instant in it is taken as it).
	Day time.Time
	// Nanos is the spend in nano-dollars (1e-9 USD).
	Nanos int64
	// Requests is how many requests were charged.
	Requests int64
}

// AddSpendParams adds spend.
type AddSpendParams struct {
	Entries []SpendEntry
	Now     time.Time
}

// SpendParams selects spend.
type SpendParams struct {
	// Since is the first UTC day read; zero reads all.
	Since time.Time
}

// spendDayLayout is how a day is kept: text that sorts as it reads.
const spendDayLayout = "2006-01-02"

func spendDay(t time.Time) string { return t.UTC().Format(spendDayLayout) }

func parseSpendDay(s string) (time.Time, error) { return time.Parse(spendDayLayout, s) }

// spendDayOf is the start of t's UTC day.
func spendDayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func (p *AddSpendParams) validate() error {
	for i, e := range p.Entries {
		switch {
		case strings.TrimSpace(e.Client) == "":
			return invalid("Entries", "entry %d: Client required", i)
		case e.Day.IsZero():
			return invalid("Entries", "entry %d: Day required", i)
		case e.Nanos < 0 || e.Requests < 0:
			return invalid("Entries", "entry %d: Nanos and Requests must be >= 0", i)
		}
	}
	return nil
}

// sinceDay is the first day read ("" for all).
func (p SpendParams) sinceDay() string {
	if p.Since.IsZero() {
		return ""
	}
	return spendDay(p.Since)
}

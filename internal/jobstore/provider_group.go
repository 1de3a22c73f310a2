package jobstore

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// A Group is a set of queued jobs routed to one provider Batch API call
// (docs/jobs-api.md, "Routing to the provider's Batch API"). Its life:
//
//	pending    the intent: its jobs are chosen and leased to the group
//	           (CreateGroup), nothing is sent yet; SubmitStartedAt is set
//	           just before the provider is called (UpdateGroup)
//	submitted  the provider accepted it: ProviderID names its batch there
//	canceling  a cancel was sent to the provider (a job's deadline came
//	           near); its results are still read when it ends
//	ended      every line is written back (FinishGroupLines)
//
// The group is held by one router at a time through a lease with a
// fencing token (LeaseGroups), as a job is held by one worker: a router
// that lost the lease can write nothing. Its jobs are running, leased to
// the group until a time far enough that the rescuer only takes them back
// from a group nobody holds any more (CreateGroupParams.LeaseUntil).
type Group struct {
	ID         string
	Upstream   string
	State      GroupState
	ProviderID string
	// Lease is the router's hold on the group.
	Lease Lease
	// Jobs and Bytes are the lines and the request bytes it was made of.
	Jobs  int
	Bytes int64
	// PullBackAt is when the earliest deadline among its jobs comes too
	// near to wait for the provider (the earliest deadline less
	// CreateGroupParams.Margin); zero when no job has a deadline.
	PullBackAt time.Time
	// SubmitStartedAt is when the provider was first called to create
	// it; zero while it never was.
	SubmitStartedAt time.Time
	CreatedAt       time.Time
	SubmittedAt     time.Time
	EndedAt         time.Time
	UpdatedAt       time.Time
}

// GroupState is where a group is in its life (see Group).
type GroupState string

// The group states.
const (
	GroupPending   GroupState = "pending"
	GroupSubmitted GroupState = "submitted"
	GroupCanceling GroupState = "canceling"
	GroupEnded     GroupState = "ended"
)

// GroupMember is one job of a group: the lease token the group holds it
// with, and whether its line was written back.
type GroupMember struct {
	JobID int64
	Token int64
	Done  bool
}

// CreateGroupParams chooses queued jobs for a new group and leases them
// to it, in one transaction, when there are enough of them or the oldest
// has waited long enough.
type CreateGroupParams struct {
	// ID is the group's id; empty lets the store make one ("grp_" + hex).
	ID string
	// Upstream is required.
	Upstream string
	// Classes are the priority classes routed (at least one).
	Classes []llm.Priority
	// Path, when set, takes only jobs sent to it (an OpenAI batch carries
	// one endpoint). Defaults to any path.
	Path string
	// DeadlineAfter: only jobs without a deadline or with one after it.
	// Required.
	DeadlineAfter time.Time
	// MinJobs: a group of fewer jobs is made only when one of them became
	// available at or before WaitedSince (it waited max_wait). At least 1.
	MinJobs     int
	WaitedSince time.Time
	// MaxJobs and MaxBytes bound the group (the provider's limits per
	// batch); MaxBytes counts the jobs' bodies and, with LineBytes, what
	// each job's line adds around its body. Both at least 1.
	MaxJobs  int
	MaxBytes int64
	// LineBytes, when set, is what job id's line adds to the provider
	// batch beyond its body (its wrapper: custom_id, method, url and the
	// separators), counted with the body against MaxBytes so that the
	// bound is the batch's size as sent. Defaults to nothing.
	LineBytes func(id int64) int64
	// LeaseUntil is when a job without a deadline leased to the group is
	// given back by the rescuer if nobody wrote it back by then; a job
	// with a deadline is given back at the earlier of it and its deadline
	// less Margin/2. Required.
	LeaseUntil time.Time
	// Margin is the deadline margin: Group.PullBackAt is the earliest
	// deadline less it.
	Margin time.Duration
	// Owner names the router, which holds the group's lease for LeaseFor.
	Owner    string
	LeaseFor time.Duration
	Now      time.Time
}

func (p *CreateGroupParams) validate() error {
	if p.ID == "" {
		p.ID = newGroupID()
	}
	switch {
	case p.Upstream == "":
		return invalid("Upstream", "required")
	case len(p.Classes) == 0:
		return invalid("Classes", "at least one class")
	case p.DeadlineAfter.IsZero():
		return invalid("DeadlineAfter", "required")
	case p.MinJobs < 1:
		return invalid("MinJobs", "%d is below 1", p.MinJobs)
	case p.MaxJobs < 1:
		return invalid("MaxJobs", "%d is below 1", p.MaxJobs)
	case p.MaxBytes < 1:
		return invalid("MaxBytes", "%d is below 1", p.MaxBytes)
	case p.LeaseUntil.IsZero():
		return invalid("LeaseUntil", "required")
	case p.LeaseFor <= 0:
		return invalid("LeaseFor", "%v is not positive", p.LeaseFor)
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	for _, c := range p.Classes {
		if !c.Valid() {
			return invalid("Classes", "%d is not 0..3", int(c))
		}
	}
	return nil
}

// groupCandidate is a queued job CreateGroup may take.
type groupCandidate struct {
	id        int64
	bytes     int64
	available time.Time
	deadline  time.Time
}

// chooseGroup picks, from candidates in claim order, the prefix that fits
// p's bounds, and reports whether a group is made of it: enough jobs, a
// bound reached, or one of them waited since p.WaitedSince.
func chooseGroup(p CreateGroupParams, candidates []groupCandidate) ([]groupCandidate, bool) {
	var out []groupCandidate
	var bytes int64
	full := false
	for _, c := range candidates {
		size := c.bytes
		if p.LineBytes != nil {
			size += p.LineBytes(c.id)
		}
		if len(out) == p.MaxJobs || (len(out) > 0 && bytes+size > p.MaxBytes) {
			full = true
			break
		}
		out = append(out, c)
		bytes += size
	}
	if len(out) == 0 {
		return nil, false
	}
	if full || len(out) >= p.MinJobs || len(out) == p.MaxJobs {
		return out, true
	}
	waited := slices.ContainsFunc(out, func(c groupCandidate) bool { return !c.available.After(p.WaitedSince) })
	return out, waited
}

// memberLease is when a job of the group is given back by the rescuer.
func (p CreateGroupParams) memberLease(c groupCandidate) time.Time {
	until := p.LeaseUntil
	if !c.deadline.IsZero() {
		until = minTime(until, c.deadline.Add(-p.Margin/2))
	}
	return storeTime(until)
}

// pullBackAt is the earliest deadline among chosen less the margin (zero
// when none has one).
func (p CreateGroupParams) pullBackAt(chosen []groupCandidate) time.Time {
	var at time.Time
	for _, c := range chosen {
		if c.deadline.IsZero() {
			continue
		}
		if t := c.deadline.Add(-p.Margin); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if at.IsZero() {
		return at
	}
	return storeTime(at)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// CreateGroupResult is the group made and its jobs (leased to it), or no
// group (nil) when the queue did not call for one yet.
type CreateGroupResult struct {
	Group *Group
	Jobs  []*Job
}

// LeaseGroupsParams renews the leases of the open groups of Upstream
// Owner holds, and takes those whose lease expired (another router died):
// a taken group's token grows by one.
type LeaseGroupsParams struct {
	Upstream string
	Owner    string
	LeaseFor time.Duration
	// Limit bounds the groups returned; zero means ListLimitDefault.
	Limit int
	Now   time.Time
}

func (p *LeaseGroupsParams) validate() error {
	switch {
	case p.Upstream == "":
		return invalid("Upstream", "required")
	case p.Owner == "":
		return invalid("Owner", "required")
	case p.LeaseFor <= 0:
		return invalid("LeaseFor", "%v is not positive", p.LeaseFor)
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	if p.Limit <= 0 {
		p.Limit = ListLimitDefault
	}
	return nil
}

// UpdateGroupParams moves a group on, fenced by its lease token.
type UpdateGroupParams struct {
	ID    string
	Token int64
	// State is the new state; empty keeps it.
	State GroupState
	// ProviderID, when set, records the provider's batch id.
	ProviderID string
	// SubmitStarted dates the first call to the provider (kept once set).
	SubmitStarted bool
	Now           time.Time
}

// GroupLine is what one job's line of a provider batch came to, written
// back by FinishGroupLines.
type GroupLine struct {
	JobID int64
	// Exactly one of Complete, Dead, Release and Fail.
	// Complete succeeds the job with the result.
	Complete *Result
	// Dead kills the job with this error (an attempt burnt), keeping
	// DeadResult when set: the provider refused the line for good.
	Dead       *AttemptError
	DeadResult *Result
	// Release puts the job back in the queue at once, no attempt burnt:
	// the line was canceled or expired at the provider, or never sent.
	Release bool
	// Fail fails the job as Store.Fail does with these Kind, Error,
	// RetryAt and Result (its ID, Token and Now are the line's):
	// FailRetry burns an attempt and requeues it at RetryAt, or kills it
	// on its last attempt or when RetryAt is past its deadline (the
	// provider answered the line with an error worth retrying);
	// FailReschedule requeues it at RetryAt without an attempt, with
	// Error in its history when recorded (held back before it was sent:
	// its client's budget); FailTerminal kills it.
	Fail *FailParams
	// Spend is what the provider billed for the line, added to the
	// client's spend with the line (nil: nothing billed).
	Spend *SpendEntry
}

// failParams is l.Fail for job l.JobID held under token, at now.
func (l GroupLine) failParams(token int64, now time.Time) FailParams {
	p := *l.Fail
	p.ID, p.Token, p.Now = l.JobID, token, now
	return p
}

// deadError is the attempt error a Dead line records on a job that made
// attempts before: its attempt number and time filled in when unset.
func (l GroupLine) deadError(attempts int, at time.Time) AttemptError {
	e := *l.Dead
	e.Attempt = cmpOr(e.Attempt, attempts+1)
	if e.At.IsZero() {
		e.At = storeTime(at)
	}
	return e
}

// FinishGroupLinesParams writes lines back, fenced by the group's token.
type FinishGroupLinesParams struct {
	GroupID string
	Token   int64
	Lines   []GroupLine
	Now     time.Time
}

// FinishGroupLinesResult says what the write did.
type FinishGroupLinesResult struct {
	// Written lists the jobs whose lines this write wrote back (their
	// spend included); a line written back before (by this router or an
	// earlier one) is skipped, spend included.
	Written []int64
	// Finished lists, per state, the jobs this write finished (succeeded
	// or dead) or requeued (queued); a job canceled meanwhile is in none
	// (its line's spend is still added).
	Finished map[State][]int64
	// Ended is true when every line of the group is written back: the
	// group is ended.
	Ended bool
}

func (p *FinishGroupLinesParams) validate() error {
	if p.GroupID == "" {
		return invalid("GroupID", "required")
	}
	if p.Now.IsZero() {
		return invalid("Now", "required")
	}
	for i, l := range p.Lines {
		n := 0
		for _, set := range []bool{l.Complete != nil, l.Dead != nil, l.Release, l.Fail != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return invalid("Lines", "line %d (job %d): exactly one of Complete, Dead, Release and Fail", i, l.JobID)
		}
		if l.Spend != nil && (l.Spend.Nanos < 0 || l.Spend.Requests < 0 || l.Spend.Client == "") {
			return invalid("Lines", "line %d (job %d): Spend needs a Client and amounts >= 0", i, l.JobID)
		}
	}
	return nil
}

func newGroupID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return "grp_" + hex.EncodeToString(b[:])
}

// sortGroups puts groups in lease order (RETURNING has none).
func sortGroups(gs []*Group) {
	slices.SortFunc(gs, func(a, b *Group) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

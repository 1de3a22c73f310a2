package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// Progress output of `sluice batch run` on stderr: on a terminal a bar
// redrawn in place; otherwise (a log file, CI) a plain line every
// batchLineEvery, so a log gets no carriage returns.
const (
	batchRedrawEvery = 200 * time.Millisecond
	batchLineEvery   = 10 * time.Second
	batchBarWidth    = 24
)

func (r *batchRun) progressLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every := batchRedrawEvery
	if !r.terminal {
		every = time.Second
	}
	for clock.Sleep(ctx, r.clk, every) == nil {
		r.printProgress(false)
	}
}

// rateAndETA is this run's completion rate (results of jobs it waited
// for, not those a resume found already finished) and the time left at
// that rate. ok is false until a rate is known.
func (r *batchRun) rateAndETA(now time.Time) (rate float64, eta time.Duration, ok bool) {
	elapsed := now.Sub(r.start).Seconds()
	waited := r.done - r.collected
	if elapsed <= 0 || waited <= 0 {
		return 0, 0, false
	}
	rate = float64(waited) / elapsed
	left := len(r.file.Lines) - r.already - r.done
	return rate, time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second), true
}

// printProgress writes done/total, rate, ETA and tokens: the bar on a
// terminal, a plain line every batchLineEvery otherwise (and at the end).
func (r *batchRun) printProgress(final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	if !r.terminal && !final && now.Sub(r.lastLine) < batchLineEvery {
		return
	}
	r.lastLine = now
	total := len(r.file.Lines)
	finished := r.already + r.done
	rate, eta, ok := r.rateAndETA(now)
	speed := "rate ?"
	if ok {
		speed = fmt.Sprintf("%.1f/s  ETA %s", rate, eta)
	}
	tokens := fmt.Sprintf("tokens in %s out %s  cost $%.4f", humanCount(r.tokensIn), humanCount(r.tokensOut), r.costUSD)
	if !r.terminal {
		fmt.Fprintf(r.stderr, "batch: %d/%d done (%d errored, %d from an earlier run)  %s  %s\n",
			finished, total, r.errored, r.already, speed, tokens)
		return
	}
	filled := 0
	if total > 0 {
		filled = finished * batchBarWidth / total
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", batchBarWidth-filled)
	end := ""
	if final {
		end = "\n"
	}
	// \r and erase-to-end-of-line: the bar redraws in place.
	fmt.Fprintf(r.stderr, "\r\x1b[K[%s] %d/%d  %s  %s  %d errored%s", bar, finished, total, speed, tokens, r.errored, end)
}

// printSummary is the closing line: what this run got, tokens and wall
// time.
func (r *batchRun) printSummary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.stderr, "batch summary: %d succeeded, %d errored, %d canceled", r.succeeded, r.errored, r.canceled)
	if r.already > 0 {
		fmt.Fprintf(r.stderr, " (+%d results from an earlier run)", r.already)
	}
	fmt.Fprintf(r.stderr, "; tokens in %d out %d; cost $%.4f; wall time %s\n", r.tokensIn, r.tokensOut, r.costUSD, r.clk.Now().Sub(r.start).Round(time.Millisecond))
}

// afterInterrupt deals with the jobs this run submitted that have not
// finished when it stops early: they keep running on the gateway (and
// cost tokens) unless canceled. cancel(n) decides (a question on a
// terminal, --cancel-on-interrupt); either way the user is told what
// keeps running. A submit cut by the interrupt may or may not have
// reached the gateway: to cancel, it is sent again with its idempotency
// key, which returns the job if it exists (and creates it otherwise, to
// be canceled at once).
func (r *batchRun) afterInterrupt(ctx context.Context, cancel func(n int) bool) {
	r.mu.Lock()
	ids := make([]int64, 0, len(r.pending))
	for _, id := range r.pending {
		ids = append(ids, id)
	}
	cut := make([][]byte, 0, len(r.submitting))
	for _, b := range r.submitting {
		cut = append(cut, b)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	if len(ids)+len(cut) == 0 {
		fmt.Fprintln(r.stderr, "batch: nothing of this run is left on the gateway; lines not yet submitted were not sent")
		return
	}
	if !cancel(len(ids) + len(cut)) {
		maybe := ""
		if len(cut) > 0 {
			maybe = fmt.Sprintf(" (and %d more whose submission was cut may be there)", len(cut))
		}
		if r.local {
			fmt.Fprintf(r.stderr, "batch: %d submitted job(s)%s stay queued in the store: a gateway serving the same store will run them (and they will be paid for); "+
				"rerun the same command to finish, or with --cancel-on-interrupt to cancel what it left (ids %s)\n", len(ids), maybe, joinIDs(ids))
			return
		}
		fmt.Fprintf(r.stderr, "batch: %d submitted job(s)%s keep running on the gateway and will be paid for: rerun the same command to collect their results, "+
			"or cancel them all with `sluice batch cancel %s` (ids %s); lines not yet submitted were not sent\n", len(ids), maybe, r.runID, joinIDs(ids))
		return
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	for _, body := range cut {
		var j jobsapi.JobView
		if _, err := r.c.call(cctx, "POST", "/v1/jobs", body, nil, &j); err == nil && !j.State.Finished() {
			ids = append(ids, j.ID)
		}
	}
	var failed []int64
	for _, id := range ids {
		var v json.RawMessage
		if _, err := r.c.call(cctx, "DELETE", fmt.Sprintf("/v1/jobs/%d", id), nil, nil, &v); err != nil {
			failed = append(failed, id)
		}
	}
	fmt.Fprintf(r.stderr, "batch: canceled %d job(s) still queued or running on the gateway", len(ids)-len(failed))
	if len(failed) > 0 {
		fmt.Fprintf(r.stderr, "; could not cancel %s (they may have finished)", joinIDs(failed))
	}
	fmt.Fprintln(r.stderr)
}

// stdinKey carries a stand-in for stdin (tests); stdinOf defaults to
// os.Stdin.
type stdinKey struct{}

// stdinOf returns the command's stdin.
func stdinOf(ctx context.Context) io.Reader {
	if r, ok := ctx.Value(stdinKey{}).(io.Reader); ok {
		return r
	}
	return os.Stdin
}

// askOnInterrupt asks on in, when it is a terminal, whether to cancel the
// jobs still on the gateway; off a terminal it never cancels.
func askOnInterrupt(in io.Reader, w io.Writer) func(n int) bool {
	return func(n int) bool {
		if !readerIsTerminal(in) {
			return false
		}
		fmt.Fprintf(w, "\ninterrupted: cancel the %d job(s) this run left queued or running on the gateway? [y/N] ", n)
		line, _ := bufio.NewReader(in).ReadString('\n')
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes"
	}
}

// terminalReader is a reader that says it is a terminal (tests).
type terminalReader struct{ io.Reader }

// readerIsTerminal reports whether r is a terminal.
func readerIsTerminal(r io.Reader) bool {
	switch v := r.(type) {
	case terminalReader:
		return true
	case *os.File:
		return isTerminal(v)
	}
	return false
}

func joinIDs(ids []int64) string {
	parts := make([]string, 0, min(len(ids), 20))
	for i, id := range ids {
		if i == 20 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-20))
			break
		}
		parts = append(parts, fmt.Sprint(id))
	}
	return strings.Join(parts, " ")
}

// humanCount writes n with a k/M suffix.
func humanCount(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	case n >= 1000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// batchServerCommand runs `sluice batch status|cancel ID` against a batch
// created with POST /v1/batches, or against a run of `sluice batch run`
// (an id starting with runIDPrefix): its status counts the run's jobs per
// state, its cancel cancels every job of it not yet finished (POST
// /v1/jobs/cancel).
func batchServerCommand(ctx context.Context, gw *gatewayFlags, action, id string, out io.Writer) error {
	c, err := gw.client()
	if err != nil {
		return err
	}
	if strings.HasPrefix(id, runIDPrefix) {
		if action == "cancel" {
			body, _ := json.Marshal(jobsapi.CancelRunRequest{RunID: id})
			return printJSON(ctx, c, out, "POST", "/v1/jobs/cancel", body)
		}
		return batchRunStatus(ctx, c, out, id)
	}
	path := "/v1/batches/" + url.PathEscape(id)
	if action == "cancel" {
		return printJSON(ctx, c, out, "POST", path+"/cancel", nil)
	}
	return printJSON(ctx, c, out, "GET", path, nil)
}

// runStatusView is what `sluice batch status RUN` prints.
type runStatusView struct {
	RunID  string              `json:"run_id"`
	Total  int                 `json:"total"`
	Counts jobsapi.StateCounts `json:"counts"`
}

// batchRunStatus counts the jobs of run id per state, reading every page of
// GET /v1/jobs?run_id=.
func batchRunStatus(ctx context.Context, c *apiClient, out io.Writer, id string) error {
	v := runStatusView{RunID: id}
	q := url.Values{"run_id": {id}, "order": {jobsapi.ListOrderOldest}, "limit": {fmt.Sprint(jobstore.ListLimitMax)}}
	for {
		var page jobsapi.ListResponse
		if _, err := c.call(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, nil, &page); err != nil {
			return err
		}
		for _, j := range page.Data {
			v.Total++
			switch j.State {
			case jobstore.StateQueued:
				v.Counts.Queued++
			case jobstore.StateRunning:
				v.Counts.Running++
			case jobstore.StateSucceeded:
				v.Counts.Succeeded++
			case jobstore.StateDead:
				v.Counts.Dead++
			case jobstore.StateCanceled:
				v.Counts.Canceled++
			}
		}
		if !page.HasMore {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	if v.Total == 0 {
		return fmt.Errorf("no run %q: no job of it on the gateway (or none of yours)", id)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	_, err := fmt.Fprintf(out, "%s\n", b)
	return err
}

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
	tokens := fmt.Sprintf("tokens in %s out %s", humanCount(r.tokensIn), humanCount(r.tokensOut))
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
	fmt.Fprintf(r.stderr, "; tokens in %d out %d; wall time %s\n", r.tokensIn, r.tokensOut, r.clk.Now().Sub(r.start).Round(time.Millisecond))
}

// afterInterrupt deals with the jobs this run submitted that have not
// finished when it stops early: they keep running on the gateway (and
// cost tokens) unless canceled. cancel(n) decides (a question on a
// terminal, --cancel-on-interrupt); either way the user is told what
// keeps running.
func (r *batchRun) afterInterrupt(ctx context.Context, cancel func(n int) bool) {
	r.mu.Lock()
	ids := make([]int64, 0, len(r.pending))
	for _, id := range r.pending {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	if len(ids) == 0 {
		fmt.Fprintln(r.stderr, "batch: nothing of this run is left on the gateway; lines not yet submitted were not sent")
		return
	}
	if !cancel(len(ids)) {
		if r.local {
			fmt.Fprintf(r.stderr, "batch: %d submitted job(s) stay queued in the store: a gateway serving the same store will run them (and they will be paid for); "+
				"rerun the same command to finish, or rerun with --cancel-on-interrupt and Ctrl-C to cancel them (ids %s)\n", len(ids), joinIDs(ids))
			return
		}
		fmt.Fprintf(r.stderr, "batch: %d submitted job(s) keep running on the gateway and will be paid for: rerun the same command to collect their results, "+
			"or cancel them with `sluice jobs cancel ID` (ids %s); lines not yet submitted were not sent\n", len(ids), joinIDs(ids))
		return
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	var failed []int64
	for _, id := range ids {
		var v json.RawMessage
		if _, err := r.c.call(cctx, "DELETE", fmt.Sprintf("/v1/jobs/%d", id), nil, nil, &v); err != nil {
			failed = append(failed, id)
		}
	}
	fmt.Fprintf(r.stderr, "batch: canceled %d of %d job(s) still queued or running on the gateway", len(ids)-len(failed), len(ids))
	if len(failed) > 0 {
		fmt.Fprintf(r.stderr, "; could not cancel %s (they may have finished)", joinIDs(failed))
	}
	fmt.Fprintln(r.stderr)
}

// askOnInterrupt asks on in (a terminal) whether to cancel the jobs still
// on the gateway; off a terminal it never cancels.
func askOnInterrupt(in *os.File, w io.Writer) func(n int) bool {
	return func(n int) bool {
		if !isTerminal(in) {
			return false
		}
		fmt.Fprintf(w, "\ninterrupted: cancel the %d job(s) this run left queued or running on the gateway? [y/N] ", n)
		line, _ := bufio.NewReader(in).ReadString('\n')
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes"
	}
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
// created with POST /v1/batches.
func batchServerCommand(ctx context.Context, gw *gatewayFlags, action, id string, out io.Writer) error {
	c, err := gw.client()
	if err != nil {
		return err
	}
	path := "/v1/batches/" + url.PathEscape(id)
	if action == "cancel" {
		return printJSON(ctx, c, out, "POST", path+"/cancel", nil)
	}
	return printJSON(ctx, c, out, "GET", path, nil)
}

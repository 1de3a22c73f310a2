package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/server"
)

// statusWatchDefault is how often `sluice status --watch` redraws.
const statusWatchDefault = 2 * time.Second

func init() {
	register(command{
		name:    "status",
		summary: "show a running gateway's state: what each upstream waits on, queues, quotas, breaker, jobs, clients",
		usage:   "[--watch] [--interval 2s] [--json] [--server URL]",
		run:     runStatus,
	})
	register(command{
		name:    "upstream",
		summary: "control an upstream of a running gateway: breaker reset|open NAME (admin key)",
		usage:   "breaker reset|open NAME [--server URL]",
		run:     runUpstream,
	})
}

func runStatus(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	gw := addGatewayFlags(fs)
	watch := fs.Bool("watch", false, "redraw every --interval until interrupted")
	interval := fs.Duration("interval", statusWatchDefault, "--watch: time between two redraws")
	asJSON := fs.Bool("json", false, "print /v1/status as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(fs.Args()) > 0 {
		return fmt.Errorf("%w: status takes no argument, got %q", errUsage, fs.Args()[0])
	}
	if *interval <= 0 {
		return fmt.Errorf("%w: --interval must be positive, got %v", errUsage, *interval)
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	f, isFile := out.(*os.File)
	tty := isFile && isTerminal(f)
	clk := clock.Real()
	for {
		var st opsview.StatusResponse
		if _, err := c.call(ctx, "GET", "/v1/status", nil, nil, &st); err != nil {
			switch {
			case *watch && ctx.Err() != nil:
				return nil // interrupted mid-call: --watch ends quietly
			case !*watch:
				return err
			}
			fmt.Fprintf(out, "%s: %v\n", clk.Now().Format(time.TimeOnly), err)
		} else {
			if *watch && tty {
				fmt.Fprint(out, "\x1b[H\x1b[2J") // home and clear: redraw in place
			}
			if *asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return fmt.Errorf("writing the status: %w", err)
				}
			} else {
				printStatus(out, c.base, st)
			}
		}
		if !*watch {
			return nil
		}
		if clock.Sleep(ctx, clk, *interval) != nil {
			return nil // interrupted
		}
		if !tty {
			fmt.Fprintln(out)
		}
	}
}

var statusClasses = []string{"critical", "high", "normal", "low"}

// printStatus writes st for a person: one block per upstream, then the
// clients.
func printStatus(w io.Writer, base string, st opsview.StatusResponse) {
	now := st.Time
	fmt.Fprintf(w, "sluice status  %s  at %s\n\n", base, now.Local().Format(time.TimeOnly))
	for _, u := range st.Upstreams {
		breaker := u.Breaker
		if u.BreakerHeld {
			breaker += " (held by an operator)"
		}
		fmt.Fprintf(w, "%s (%s)  breaker %s  %s\n", u.Name, u.Protocol, breaker, waitingLine(u, now))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if len(u.Fallbacks) > 0 {
			fmt.Fprintf(tw, "  fallbacks\t%s\n", strings.Join(u.Fallbacks, ", "))
		}
		fmt.Fprintf(tw, "  in flight\t%d of %d\n", u.InFlight, u.ConcurrencyLimit)
		if len(u.Oldest) > 0 {
			o := u.Oldest[0]
			fmt.Fprintf(tw, "  open requests\t%d, oldest %s (%s, %s, %s)\n", u.OpenRequests, seconds(o.AgeSeconds), o.ID, o.Client, o.Priority)
		}
		var q []string
		for _, c := range statusClasses {
			s := fmt.Sprintf("%s %d", c, u.Queued[c])
			if ow, ok := u.OldestWait[c]; ok && u.Queued[c] > 0 {
				s += fmt.Sprintf(" (oldest %s)", seconds(ow))
			}
			q = append(q, s)
		}
		fmt.Fprintf(tw, "  queued\t%s\n", strings.Join(q, ", "))
		for _, h := range u.Held {
			fmt.Fprintf(tw, "  held by client limit\t%s\n", heldLine(h, now))
		}
		dims := make([]string, 0, len(u.Buckets))
		for d := range u.Buckets {
			dims = append(dims, d)
		}
		slices.Sort(dims)
		for _, d := range dims {
			b := u.Buckets[d]
			line := fmt.Sprintf("  %s\tused %s of %s, available %s, limit %s/min", d, amount(b.Used), amount(b.Depth), amount(b.Level), amount(b.LimitPerMinute))
			if b.Reserved > 0 {
				line += ", in flight " + amount(b.Reserved)
			}
			if b.ProviderRemaining != nil {
				line += ", provider: " + amount(*b.ProviderRemaining) + " left"
				if b.ProviderLimit != nil {
					line += " of " + amount(*b.ProviderLimit)
				}
			}
			fmt.Fprintln(tw, line)
		}
		if j := u.Jobs; j != nil {
			dead := fmt.Sprint(j.Dead)
			if j.DeadCapped {
				dead += "+"
			}
			fmt.Fprintf(tw, "  jobs\tqueued %d (delayed %d), running %d, dead %s\n", j.Queued, j.Delayed, j.Running, dead)
		}
		fmt.Fprintf(tw, "  last 429\t%s\n", throttleLine(u.Last429, now))
		fmt.Fprintf(tw, "  last 529\t%s\n", throttleLine(u.Last529, now))
		if n := len(u.BreakerHistory); n > 0 {
			var hs []string
			for _, e := range u.BreakerHistory[max(n-3, 0):] {
				hs = append(hs, fmt.Sprintf("%s %s→%s (%s)", e.At.Local().Format(time.TimeOnly), e.From, e.To, e.Cause))
			}
			fmt.Fprintf(tw, "  breaker history\t%s\n", strings.Join(hs, "; "))
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	if len(st.Clients) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT\tREQUESTS\tSUCCEEDED\tFAILED\tTOKENS IN\tTOKENS OUT")
		for _, c := range st.Clients {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", c.Client, c.Requests, c.Succeeded, c.Failed, c.TokensIn, c.TokensOut)
		}
		_ = tw.Flush()
	}
	printSpend(w, st.Spend)
}

// printSpend writes each client's spend and what is left of its budget
// windows (a window without a limit shows its spend only).
func printSpend(w io.Writer, sp *admit.SpendStatus) {
	if sp == nil || len(sp.Clients) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tSPENT TODAY\tLEFT TODAY\tSPENT MONTH\tLEFT MONTH\tSPENT TOTAL\tLEFT TOTAL\tIN FLIGHT")
	for _, c := range sp.Clients {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Client, usd(c.Day.SpentUSD), left(c.Day), usd(c.Month.SpentUSD), left(c.Month),
			usd(c.Total.SpentUSD), left(c.Total), usd(c.ReservedUSD))
	}
	_ = tw.Flush()
}

func usd(v float64) string { return fmt.Sprintf("$%.4f", v) }

// left is a window's remaining budget, "-" without a limit.
func left(ws admit.WindowSpend) string {
	if ws.RemainingUSD == nil || ws.LimitUSD == nil {
		return "-"
	}
	return usd(*ws.RemainingUSD) + " of " + usd(*ws.LimitUSD)
}

// waitingLine says what u's queue waits on: "nothing waits" only when
// nothing is queued.
func waitingLine(u opsview.UpstreamStatus, now time.Time) string {
	wo := u.WaitingOn
	if wo == nil {
		queued := 0
		for _, n := range u.Queued {
			queued += n
		}
		if queued == 0 {
			return "nothing waits"
		}
		return fmt.Sprintf("%d queued, being admitted", queued)
	}
	s := "waiting on " + wo.Reason
	switch {
	case wo.Limit != "":
		s += " (" + wo.Limit + ")"
	case wo.Reason == opsview.WaitClientLimit:
		s += " (another client's)"
	case wo.Dimension != "":
		s += " (" + wo.Dimension + ")"
	}
	return s + untilText(wo.Until, now)
}

// heldLine is one client held back by its own limit: its class, how many
// of its requests wait, the limit and when it has room.
func heldLine(h opsview.HeldClient, now time.Time) string {
	until := untilText(h.Until, now)
	if h.Until == nil {
		until = " until one of its requests ends"
	}
	return fmt.Sprintf("%s %s: %d queued, %s%s", h.Client, h.Priority, h.Queued, h.Limit, until)
}

// untilText is " until HH:MM:SS, in 1.5s", or "" without a time.
func untilText(t *time.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	return " until " + t.Local().Format(time.TimeOnly) + ", in " + seconds(max(t.Sub(now).Seconds(), 0))
}

func throttleLine(t *opsview.ThrottleStatus, now time.Time) string {
	if t == nil {
		return "none"
	}
	s := fmt.Sprintf("%s ago, %d", seconds(now.Sub(t.At).Seconds()), t.Status)
	if t.ErrorType != "" {
		s += " " + t.ErrorType
	}
	if t.RetryAfterSeconds != nil {
		s += ", retry-after " + seconds(*t.RetryAfterSeconds)
	}
	return s
}

func seconds(v float64) string {
	return (time.Duration(v * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func amount(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

func runUpstream(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	gw := addGatewayFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) != 3 || pos[0] != "breaker" || (pos[1] != "reset" && pos[1] != "open") {
		return fmt.Errorf("%w: want breaker reset|open NAME", errUsage)
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(server.BreakerRequest{Action: pos[1]})
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	var resp server.BreakerResponse
	if _, err := c.call(ctx, "POST", "/v1/upstreams/"+url.PathEscape(pos[2])+"/breaker", body, nil, &resp); err != nil {
		return err
	}
	msg := fmt.Sprintf("upstream %s: breaker %s → %s", resp.Upstream, resp.From, resp.Breaker)
	if resp.Held {
		msg += " (held open until 'sluice upstream breaker reset " + resp.Upstream + "')"
	}
	fmt.Fprintln(out, msg)
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clientsapi"
	"github.com/sluicehq/sluice/internal/clock"
)

func init() {
	register(command{
		name:    "clients",
		summary: "create, list, change, rotate and revoke a running gateway's clients (admin key)",
		usage: "create NAME [--role R] [--rpm N] [--budget-day USD] [--expires T] ... | ls | get NAME | " +
			"update NAME [flags of create] | rotate NAME [--grace 10m] | revoke NAME [--server URL] [--key KEY]",
		run:  runClients,
		subs: []string{"create", "ls", "list", "get", "update", "rotate", "revoke"},
	})
}

// clientFlags are the settings create and update take; only the flags
// given are sent.
type clientFlags struct {
	fs                                  *flag.FlagSet
	role, defaultPriority, maxPriority  *string
	rpm, tpm                            *float64
	maxConcurrency                      *int
	budgetDay, budgetMonth, budgetTotal *float64
	expires                             *string
	expiresIn                           *time.Duration
	noExpiry                            *bool
	allowedUpstreams, allowedModels     *string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	return &clientFlags{fs: fs,
		role:            fs.String("role", "", "create, update: client or admin"),
		defaultPriority: fs.String("default-priority", "", "create, update: class without X-Priority (critical, high, normal, low)"),
		maxPriority:     fs.String("max-priority", "", "create, update: most urgent class allowed"),
		rpm:             fs.Float64("rpm", 0, "create, update: requests per minute on each upstream (0: no limit)"),
		tpm:             fs.Float64("tpm", 0, "create, update: tokens per minute on each upstream (0: no limit)"),
		maxConcurrency:  fs.Int("max-concurrency", 0, "create, update: requests in flight on each upstream (0: no limit)"),
		budgetDay:       fs.Float64("budget-day", 0, "create, update: US dollars per UTC day (0: no cap)"),
		budgetMonth:     fs.Float64("budget-month", 0, "create, update: US dollars per UTC month (0: no cap)"),
		budgetTotal:     fs.Float64("budget-total", 0, "create, update: US dollars for good (0: no cap)"),
		expires:         fs.String("expires", "", "create, update: RFC 3339 time the client's keys stop working"),
		expiresIn:       fs.Duration("expires-in", 0, "create, update: the keys stop working this long from now"),
		noExpiry:        fs.Bool("no-expiry", false, "update: the keys no longer expire"),
		allowedUpstreams: fs.String("allowed-upstreams", "",
			"create, update: comma-separated upstreams the client may use (\"\": every one)"),
		allowedModels: fs.String("allowed-models", "",
			"create, update: comma-separated model patterns the client may use, '*' matching any run of characters, e.g. 'claude-*,gpt-4o*' (\"\": every one)"),
	}
}

// set reports whether the flag name was given.
func (f *clientFlags) set(name string) bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}

// request builds the body from the flags given over cur (the client's
// current settings on update, zero on create), so that the limits and
// budget keep what the flags do not name.
func (f *clientFlags) request(cur clientsapi.ClientInfo, now time.Time) (clientsapi.ClientRequest, error) {
	var req clientsapi.ClientRequest
	str := func(name string, v *string, dst **string) {
		if f.set(name) {
			*dst = v
		}
	}
	str("role", f.role, &req.Role)
	str("default-priority", f.defaultPriority, &req.DefaultPriority)
	str("max-priority", f.maxPriority, &req.MaxPriority)
	if f.set("rpm") || f.set("tpm") || f.set("max-concurrency") {
		l := cur.Limits
		if f.set("rpm") {
			l.RequestsPerMinute = *f.rpm
		}
		if f.set("tpm") {
			l.TokensPerMinute = *f.tpm
		}
		if f.set("max-concurrency") {
			l.MaxConcurrency = *f.maxConcurrency
		}
		req.Limits = &l
	}
	if f.set("budget-day") || f.set("budget-month") || f.set("budget-total") {
		b := cur.Budget
		if f.set("budget-day") {
			b.Day = *f.budgetDay
		}
		if f.set("budget-month") {
			b.Month = *f.budgetMonth
		}
		if f.set("budget-total") {
			b.Total = *f.budgetTotal
		}
		req.Budget = &b
	}
	list := func(name string, v *string, dst **[]string) {
		if f.set(name) {
			items := []string{}
			for it := range strings.SplitSeq(*v, ",") {
				if it = strings.TrimSpace(it); it != "" {
					items = append(items, it)
				}
			}
			*dst = &items
		}
	}
	list("allowed-upstreams", f.allowedUpstreams, &req.AllowedUpstreams)
	list("allowed-models", f.allowedModels, &req.AllowedModels)
	n := 0
	for _, name := range []string{"expires", "expires-in", "no-expiry"} {
		if f.set(name) {
			n++
		}
	}
	switch {
	case n > 1:
		return req, fmt.Errorf("%w: give one of --expires, --expires-in and --no-expiry", errUsage)
	case f.set("expires"):
		t, err := time.Parse(time.RFC3339, *f.expires)
		if err != nil {
			return req, fmt.Errorf("%w: --expires: want an RFC 3339 time such as 2027-01-01T00:00:00Z, got %q", errUsage, *f.expires)
		}
		req.ExpiresAt = clientsapi.OptionalTime{Set: true, Time: &t}
	case f.set("expires-in"):
		if *f.expiresIn <= 0 {
			return req, fmt.Errorf("%w: --expires-in must be positive, got %v", errUsage, *f.expiresIn)
		}
		t := now.Add(*f.expiresIn).UTC()
		req.ExpiresAt = clientsapi.OptionalTime{Set: true, Time: &t}
	case f.set("no-expiry"):
		req.ExpiresAt = clientsapi.OptionalTime{Set: true}
	}
	return req, nil
}

// anySet reports whether any setting flag was given.
func (f *clientFlags) anySet() bool {
	n := 0
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "server", "key", "api-key", "json", "grace":
		default:
			n++
		}
	})
	return n > 0
}

func runClients(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	gw := addGatewayFlags(fs)
	cf := addClientFlags(fs)
	grace := fs.Duration("grace", 0, "rotate: keep the current keys valid this long (default 0: they stop at once)")
	asJSON := fs.Bool("json", false, "print the gateway's JSON answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: want create, ls, get, update, rotate or revoke", errUsage)
	}
	sub := pos[0]
	if sub == "list" {
		sub = "ls"
	}
	name := ""
	switch sub {
	case "ls":
		if len(pos) != 1 {
			return fmt.Errorf("%w: ls takes no argument", errUsage)
		}
	case "create", "get", "update", "rotate", "revoke":
		if len(pos) != 2 {
			return fmt.Errorf("%w: %s takes one client name", errUsage, sub)
		}
		name = pos[1]
	default:
		return fmt.Errorf("%w: unknown clients subcommand %q (want create, ls, get, update, rotate or revoke)", errUsage, sub)
	}
	if sub != "create" && sub != "update" && cf.anySet() {
		return fmt.Errorf("%w: %s takes no client settings (only create and update do)", errUsage, sub)
	}
	if sub != "rotate" && *grace != 0 {
		return fmt.Errorf("%w: --grace is for rotate", errUsage)
	}
	if *grace < 0 {
		return fmt.Errorf("%w: --grace must be >= 0, got %v", errUsage, *grace)
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	path := "/v1/clients/" + url.PathEscape(name)
	var info clientsapi.ClientInfo
	switch sub {
	case "ls":
		var list clientsapi.ClientList
		if _, err := c.call(ctx, "GET", "/v1/clients", nil, nil, &list); err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, list)
		}
		return printClients(out, list)
	case "get":
		if _, err := c.call(ctx, "GET", path, nil, nil, &info); err != nil {
			return err
		}
		return writeJSON(out, info)
	case "create":
		req, err := cf.request(clientsapi.ClientInfo{}, clock.Real().Now())
		if err != nil {
			return err
		}
		req.Name = name
		body, _ := json.Marshal(req)
		if _, err := c.call(ctx, "POST", "/v1/clients", body, nil, &info); err != nil {
			return err
		}
	case "update":
		if !cf.anySet() {
			return fmt.Errorf("%w: update needs at least one setting (--role, --rpm, --budget-day, ...)", errUsage)
		}
		var cur clientsapi.ClientInfo
		if _, err := c.call(ctx, "GET", path, nil, nil, &cur); err != nil {
			return err
		}
		req, err := cf.request(cur, clock.Real().Now())
		if err != nil {
			return err
		}
		body, _ := json.Marshal(req)
		if _, err := c.call(ctx, "PATCH", path, body, nil, &info); err != nil {
			return err
		}
	case "rotate":
		body, _ := json.Marshal(clientsapi.RotateRequest{GraceSeconds: grace.Seconds()})
		if _, err := c.call(ctx, "POST", path+"/rotate", body, nil, &info); err != nil {
			return err
		}
	case "revoke":
		var rev clientsapi.ClientRevoked
		if _, err := c.call(ctx, "DELETE", path, nil, nil, &rev); err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(out, rev)
		}
		fmt.Fprintf(out, "revoked client %s: its keys are refused (on every node within clients_poll)\n", rev.Name)
		return nil
	}
	if *asJSON {
		return writeJSON(out, info)
	}
	verb := map[string]string{"create": "created", "update": "updated", "rotate": "rotated the key of"}[sub]
	fmt.Fprintf(out, "%s client %s (role %s, %s)\n", verb, info.Name, info.Role, describeClientLimits(info.Limits, info.Budget, info.Access))
	if info.Key != "" {
		fmt.Fprintf(out, "key: %s\n(shown once: store it now; the gateway keeps only its hash)\n", info.Key)
	}
	for _, k := range info.Keys {
		if k.ExpiresAt != nil && sub == "rotate" {
			fmt.Fprintf(out, "old key %s… valid until %s\n", k.Prefix, k.ExpiresAt.Format(time.RFC3339))
		}
	}
	return nil
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing the answer: %w", err)
	}
	return nil
}

func printClients(out io.Writer, list clientsapi.ClientList) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tROLE\tLIMITS\tKEYS\tEXPIRES")
	for _, c := range list.Data {
		keys := "-"
		if c.Source == clientsapi.ClientSourceAPI {
			var ps []string
			for _, k := range c.Keys {
				ps = append(ps, k.Prefix+"…")
			}
			keys = strings.Join(ps, ",")
		}
		exp := "-"
		if c.ExpiresAt != nil {
			exp = c.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Source, c.Role, describeClientLimits(c.Limits, c.Budget, c.Access), keys, exp)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the list: %w", err)
	}
	return nil
}

// describeClientLimits is a client's limits, budget and allow-lists in a
// few words.
func describeClientLimits(l admit.ClientLimits, b admit.Budget, a admit.Access) string {
	var parts []string
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if l.RequestsPerMinute > 0 {
		parts = append(parts, num(l.RequestsPerMinute)+" rpm")
	}
	if l.TokensPerMinute > 0 {
		parts = append(parts, num(l.TokensPerMinute)+" tpm")
	}
	if l.MaxConcurrency > 0 {
		parts = append(parts, strconv.Itoa(l.MaxConcurrency)+" in flight")
	}
	for _, w := range []struct {
		name string
		v    float64
	}{{"day", b.Day}, {"month", b.Month}, {"total", b.Total}} {
		if w.v > 0 {
			parts = append(parts, "$"+num(w.v)+"/"+w.name)
		}
	}
	if len(a.Upstreams) > 0 {
		parts = append(parts, "upstreams "+strings.Join(a.Upstreams, "|"))
	}
	if len(a.Models) > 0 {
		parts = append(parts, "models "+strings.Join(a.Models, "|"))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

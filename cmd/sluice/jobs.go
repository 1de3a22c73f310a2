package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/jobsapi"
)

// serverDefault is the gateway the job commands talk to.
const serverDefault = "http://127.0.0.1:8080"

// apiCallTimeout bounds one call to the gateway, a long poll included (the
// gateway answers ?wait= within jobsapi.MaxLongPollDefault), so a gateway that
// stops answering fails the command instead of hanging it.
const apiCallTimeout = jobsapi.MaxLongPollDefault + 30*time.Second

func init() {
	register(command{
		name:    "jobs",
		summary: "list, inspect, cancel and retry durable jobs on a running gateway",
		usage:   "ls [--state S] [--upstream U] [--run RUN] [--limit N] [--cursor C] [--oldest-first] | get ID [--wait 30s] | cancel ID | retry ID|--all [--server URL] [--key KEY]",
		run:     runJobs,
		subs:    []string{"ls", "list", "get", "cancel", "retry"},
	})
}

// apiClient talks to a gateway's job API.
type apiClient struct {
	base string
	key  string
	hc   *http.Client
}

func newAPIClient(server, key string) (*apiClient, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: --server must be an http(s) URL, got %q", errUsage, server)
	}
	return &apiClient{base: strings.TrimRight(server, "/"), key: key, hc: &http.Client{Timeout: apiCallTimeout}}, nil
}

// call sends a request and decodes a 2xx JSON answer into out; any other
// answer is an error carrying the API's message.
func (c *apiClient) call(ctx context.Context, method, path string, body []byte, hdr http.Header, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("building request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("X-Api-Key", c.key)
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("calling %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("reading %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e jobsapi.APIError
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, e.Error.Message)
		}
		return resp.StatusCode, fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func runJobs(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	gw := addGatewayFlags(fs)
	state := fs.String("state", "", "ls: only jobs in this state (queued, running, succeeded, dead, canceled)")
	upstream := fs.String("upstream", "", "ls: only jobs of this upstream; retry --all: only this upstream")
	run := fs.String("run", "", "ls: only the jobs of this run (the run_… id `sluice batch run` prints)")
	limit := fs.Int("limit", 50, "ls: page size (1-1000)")
	cursor := fs.String("cursor", "", "ls: next_cursor of the previous page")
	oldest := fs.Bool("oldest-first", false, "ls: list the oldest jobs first (default: the newest first)")
	wait := fs.Duration("wait", 0, "get: wait up to this long for the job to finish")
	all := fs.Bool("all", false, "retry: requeue every dead job (or every dead job of --upstream)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 0 {
		return fmt.Errorf("%w: want ls, get, cancel or retry", errUsage)
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	needID := func() (string, error) {
		if len(pos) != 2 {
			return "", fmt.Errorf("%w: %s takes one job id", errUsage, pos[0])
		}
		return url.PathEscape(pos[1]), nil
	}
	switch pos[0] {
	case "ls", "list":
		q := url.Values{}
		order := jobsapi.ListOrderNewest
		if *oldest {
			order = jobsapi.ListOrderOldest
		}
		for k, v := range map[string]string{"state": *state, "upstream": *upstream, "run_id": *run, "cursor": *cursor, "limit": fmt.Sprint(*limit), "order": order} {
			if v != "" {
				q.Set(k, v)
			}
		}
		var page jobsapi.ListResponse
		if _, err := c.call(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, nil, &page); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tUPSTREAM\tPRIORITY\tATTEMPTS\tRUN\tCUSTOM_ID\tCREATED")
		for _, j := range page.Data {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.State, j.Upstream, j.Priority, j.Attempts, j.MaxAttempts,
				cmp.Or(j.RunID, j.BatchID, "-"), cmp.Or(j.CustomID, "-"), j.CreatedAt.Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing the list: %w", err)
		}
		if page.HasMore {
			more := ""
			if *oldest {
				more = " --oldest-first"
			}
			fmt.Fprintf(out, "more: --cursor %s%s\n", page.NextCursor, more)
		}
		return nil
	case "get":
		id, err := needID()
		if err != nil {
			return err
		}
		path := "/v1/jobs/" + id
		if *wait > 0 {
			path += "?wait=" + wait.String()
		}
		return printJSON(ctx, c, out, "GET", path, nil)
	case "cancel":
		id, err := needID()
		if err != nil {
			return err
		}
		return printJSON(ctx, c, out, "DELETE", "/v1/jobs/"+id, nil)
	case "retry":
		if *all {
			if len(pos) != 1 {
				return fmt.Errorf("%w: retry takes a job id or --all, not both", errUsage)
			}
			body, _ := json.Marshal(jobsapi.RetryRequest{Upstream: *upstream, All: *upstream == ""})
			return printJSON(ctx, c, out, "POST", "/v1/jobs/retry", body)
		}
		id, err := needID()
		if err != nil {
			return err
		}
		return printJSON(ctx, c, out, "POST", "/v1/jobs/"+id+"/retry", nil)
	}
	return fmt.Errorf("%w: unknown jobs subcommand %q (want ls, get, cancel or retry)", errUsage, pos[0])
}

func printJSON(ctx context.Context, c *apiClient, out io.Writer, method, path string, body []byte) error {
	var v json.RawMessage
	if _, err := c.call(ctx, method, path, body, nil, &v); err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, v, "", "  "); err != nil {
		return fmt.Errorf("formatting the answer: %w", err)
	}
	pretty.WriteByte('\n')
	_, err := out.Write(pretty.Bytes())
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("writing the answer: %w", err)
	}
	return nil
}

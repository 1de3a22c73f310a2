package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/server"
)

func init() {
	register(command{
		name:    "batch",
		summary: "run a JSONL batch file through the gateway's job queue, resumably",
		usage:   "run input.jsonl -o results.jsonl [--server URL] [--key KEY] [--store DSN --config FILE] [--upstream NAME] [--priority low] [--cancel-on-interrupt] | status ID|RUN | cancel ID|RUN",
		run:     runBatch,
		subs:    []string{"run", "status", "cancel"},
	})
}

// batchRun is one `sluice batch run`.
type batchRun struct {
	c        *apiClient
	file     *jobsapi.BatchFile
	hash     string
	runID    string // the run's id: every job of it carries it (runIDPrefix + hash)
	upstream string
	priority string
	stderr   io.Writer
	terminal bool // stderr is a terminal: a redrawn bar, else periodic lines
	local    bool // --store: the gateway runs in this process and stops with it
	clk      clock.Clock

	mu        sync.Mutex
	out       *os.File
	done      int // results written by this run
	collected int // of done: finished before this run asked (a resume): not in the rate
	succeeded int
	errored   int
	canceled  int
	already   int // results in the file from an earlier run
	tokensIn  int64
	tokensOut int64
	costUSD   float64 // the results' X-Sluice-Cost-Usd, summed
	start     time.Time
	pending   map[string]int64 // custom_id -> job id submitted and not finished
	// submitting holds the submit bodies in flight: cut by Ctrl-C, they
	// may or may not have reached the gateway.
	submitting map[string][]byte
	lastLine   time.Time // last periodic line (not a terminal)
}

func runBatch(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	output := fs.String("o", "", "results file (JSONL); required. Rerunning with the same file resumes")
	gw := addGatewayFlags(fs)
	cancelOnInterrupt := fs.Bool("cancel-on-interrupt", false, "on Ctrl-C, cancel the jobs still queued or running on the gateway without asking")
	store := fs.String("store", "", "run in-process on this store (sqlite:PATH or postgres://…) instead of a gateway; needs --config")
	config := fs.String("config", "", "gateway config file (with --store): the upstreams to call")
	upstream := fs.String("upstream", "", "upstream name; defaults to anthropic or openai after the file's shape")
	priority := fs.String("priority", "low", "priority class: critical, high, normal or low")
	concurrency := fs.Int("concurrency", 64, "jobs waited on at once")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) == 2 && (pos[0] == "cancel" || pos[0] == "status") {
		return batchServerCommand(ctx, gw, pos[0], pos[1], out)
	}
	if len(pos) != 2 || pos[0] != "run" {
		return fmt.Errorf("%w: want: batch run input.jsonl -o results.jsonl, batch status ID or batch cancel ID", errUsage)
	}
	if *output == "" {
		return fmt.Errorf("%w: -o results.jsonl is required", errUsage)
	}
	if *concurrency < 1 {
		return fmt.Errorf("%w: --concurrency must be >= 1", errUsage)
	}
	data, err := os.ReadFile(pos[1])
	if err != nil {
		return fmt.Errorf("reading input: %w", err)
	}
	f, err := jobsapi.ParseBatchFile(data, 10_000_000)
	if err != nil {
		return fmt.Errorf("reading input: %w", err)
	}
	if len(f.Invalid) > 0 {
		e := f.Invalid[0]
		return fmt.Errorf("%s: %d invalid line(s), first: line %d: %s", pos[1], len(f.Invalid), e.Line, e.Message)
	}
	sum := sha256.Sum256(data)
	stderr := stderrOf(ctx)
	hash := hex.EncodeToString(sum[:8])
	r := &batchRun{file: f, hash: hash, runID: runIDPrefix + hash, upstream: cmp.Or(*upstream, string(f.Format)), priority: *priority,
		stderr: stderr, terminal: writerIsTerminal(stderr), clk: clock.Real(), pending: map[string]int64{}, submitting: map[string][]byte{}}

	if *store != "" {
		if *config == "" {
			return fmt.Errorf("%w: --store needs --config to know the upstreams", errUsage)
		}
		stop, c, err := localGateway(ctx, *store, *config, gw.Key())
		if err != nil {
			return err
		}
		defer stop()
		r.c, r.local = c, true
	} else {
		if r.c, err = gw.client(); err != nil {
			return err
		}
	}
	interrupt := askOnInterrupt(stdinOf(ctx), stderr)
	if *cancelOnInterrupt {
		interrupt = func(int) bool { return true }
	}
	return r.run(ctx, *output, *concurrency, interrupt)
}

// runIDPrefix starts the id of a `sluice batch run`: what `sluice batch
// cancel` and `status` tell a run by from a batch of POST /v1/batches
// (batch_…).
const runIDPrefix = "run_"

// idempotencyKey ties a job to this input file's content and a custom_id,
// so a rerun never queues a request twice.
func (r *batchRun) idempotencyKey(customID string) string {
	id := sha256.Sum256([]byte(customID))
	return "sluice-batch:" + r.hash + ":" + hex.EncodeToString(id[:16])
}

// resumeOutput opens the results file for appending, dropping a torn last
// line, and returns the custom_ids already in it.
func resumeOutput(path string) (*os.File, map[string]bool, error) {
	done := map[string]bool{}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("reading results: %w", err)
	}
	keep := len(data)
	if i := bytes.LastIndexByte(data, '\n'); i+1 != len(data) {
		keep = i + 1 // a line cut by a crash: it will be written again
	}
	sc := bufio.NewScanner(bytes.NewReader(data[:keep]))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.CustomID != "" {
			done[l.CustomID] = true
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening results: %w", err)
	}
	if err := f.Truncate(int64(keep)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("truncating a torn results line: %w", err)
	}
	if _, err := f.Seek(int64(keep), io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("seeking results: %w", err)
	}
	return f, done, nil
}

func (r *batchRun) run(ctx context.Context, output string, concurrency int, cancelPending func(n int) bool) error {
	out, done, err := resumeOutput(output)
	if err != nil {
		return err
	}
	defer out.Close()
	r.out = out
	var todo []jobsapi.BatchLine
	for _, l := range r.file.Lines {
		if !done[l.CustomID] {
			todo = append(todo, l)
		}
	}
	r.already = len(r.file.Lines) - len(todo)
	r.start = r.clk.Now()
	fmt.Fprintf(r.stderr, "batch: run %s, %d line(s) (`sluice batch status %s` counts its jobs, `sluice batch cancel %s` cancels those not finished)\n",
		r.runID, len(r.file.Lines), r.runID, r.runID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan jobsapi.BatchLine)
	var wg sync.WaitGroup
	for range min(concurrency, max(len(todo), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				if err := r.one(ctx, l); err != nil {
					cancel(err)
				}
			}
		}()
	}
	progressDone := make(chan struct{})
	go r.progressLoop(ctx, progressDone)
feed:
	for _, l := range todo {
		select {
		case work <- l:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	cancel(nil)
	<-progressDone
	r.printProgress(true)
	if err := out.Sync(); err != nil {
		return fmt.Errorf("saving results: %w", err)
	}
	r.mu.Lock()
	finished := r.already + r.done
	r.mu.Unlock()
	if finished < len(r.file.Lines) {
		cause := context.Cause(ctx)
		r.afterInterrupt(ctx, cancelPending)
		r.printSummary()
		return fmt.Errorf("stopped after %d/%d results (%w); run the same command again to finish the rest", finished, len(r.file.Lines), cause)
	}
	r.printSummary()
	return nil
}

// one submits a line (idempotently) and waits for its result.
func (r *batchRun) one(ctx context.Context, l jobsapi.BatchLine) error {
	path := l.Path
	if path == "/v1/chat/completions" || path == "/v1/messages" {
		path = "" // the default: understood by gateways older than the path field
	}
	body, err := json.Marshal(jobsapi.SubmitRequest{Upstream: r.upstream, Request: l.Body, Priority: r.priority,
		IdempotencyKey: r.idempotencyKey(l.CustomID), Path: path, RunID: r.runID, CustomID: l.CustomID})
	if err != nil {
		return fmt.Errorf("encoding line %d: %w", l.Line, err)
	}
	var j jobsapi.JobView
	r.mu.Lock()
	r.submitting[l.CustomID] = body
	r.mu.Unlock()
	_, err = r.c.call(ctx, "POST", "/v1/jobs", body, nil, &j)
	r.mu.Lock()
	if err == nil {
		// A failed submit stays in submitting: it may have reached the
		// gateway (afterInterrupt finds it again by its idempotency key).
		delete(r.submitting, l.CustomID)
		r.pending[l.CustomID] = j.ID
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("line %d: %w", l.Line, err)
	}
	// Finished already: a rerun collecting what the gateway did while
	// this command was away; it says nothing of the rate.
	collected := j.State.Finished()
	for !j.State.Finished() {
		if _, err := r.c.call(ctx, "GET", fmt.Sprintf("/v1/jobs/%d?wait=30s", j.ID), nil, nil, &j); err != nil {
			return fmt.Errorf("waiting for line %d: %w", l.Line, err)
		}
	}
	j.CustomID = l.CustomID
	line, _ := jobsapi.ResultLine(r.file.Format, j)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.out.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	delete(r.pending, l.CustomID)
	r.done++
	if collected {
		r.collected++
	}
	switch j.State {
	case jobstore.StateSucceeded:
		r.succeeded++
	case jobstore.StateCanceled:
		r.canceled++
	default:
		r.errored++
	}
	if j.Response != nil {
		r.tokensIn += j.Response.Usage.InputTokens
		r.tokensOut += j.Response.Usage.OutputTokens
		if c, err := strconv.ParseFloat(j.Response.Headers[jobs.CostHeader], 64); err == nil && c > 0 {
			r.costUSD += c
		}
	}
	return nil
}

// localGateway runs the gateway of the config file in this process, with
// its job queue on store and no listener, and returns a client for it: the
// same assembly as sluice serve, so every upstream setting (profile, retry,
// breaker, classes) and every jobs: setting applies. key authenticates the
// client when the config names clients.
func localGateway(ctx context.Context, dsn, configPath, key string) (func(), *apiClient, error) {
	cfg, err := server.LoadConfig(configPath, os.LookupEnv)
	if err != nil {
		return nil, nil, err
	}
	cfg.Store = dsn
	srv, err := server.New(cfg, server.WithoutListener())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", configPath, err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, nil, errors.Join(err, srv.Stop(context.WithoutCancel(ctx)))
	}
	c := &apiClient{base: "http://sluice.local", key: key, hc: &http.Client{Transport: handlerTransport{srv.Handler()}, Timeout: apiCallTimeout}}
	return func() { _ = srv.Stop(context.WithoutCancel(ctx)) }, c, nil
}

// handlerTransport serves requests with an in-process handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

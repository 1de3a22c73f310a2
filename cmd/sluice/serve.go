package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/server"
)

func init() {
	register(command{
		name:    "serve",
		summary: "run the gateway: a drop-in proxy for the Anthropic and OpenAI APIs",
		usage:   "[--config FILE] [--listen ADDR] [--grace 30s] [--log-format text|json] [--log-level info] [--check]",
		run:     runServe,
	})
}

// stopMargin is how long `sluice serve` gives the dispatchers, the job
// queue and the cluster node to stop after the shutdown grace period: the
// process exits at most shutdown_grace + stopMargin after SIGTERM (a
// Kubernetes terminationGracePeriodSeconds must cover both; deploy/helm).
const stopMargin = 10 * time.Second

// configEnv names the config file when --config is not given, so that a
// container image sets it once for `serve` and its health check.
const configEnv = "SLUICE_CONFIG"

// configFile is the config file to read: the --config flag, else
// $SLUICE_CONFIG, else "" (upstreams from the environment).
func configFile(flagValue string, lookup server.LookupEnv) string {
	if flagValue != "" {
		return flagValue
	}
	v, _ := lookup(configEnv)
	return v
}

func runServe(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	configFlag := fs.String("config", "", "YAML config `file` (see docs/config.md; default $SLUICE_CONFIG); without one, upstreams come from ANTHROPIC_API_KEY / OPENAI_API_KEY")
	listen := fs.String("listen", "", "listen `address`, overriding the config (default "+server.ListenDefault+")")
	grace := fs.Duration("grace", 0, "how long shutdown waits for in-flight requests, overriding the config (default "+server.ShutdownGraceDefault.String()+
		"); the process then has up to "+stopMargin.String()+" more to stop the dispatchers and the job queue before it exits")
	check := fs.Bool("check", false, "validate the configuration and exit")
	logFormat := fs.String("log-format", "", "log `format` on stderr: text or json (default text on a terminal, json otherwise)")
	logLevel := fs.String("log-level", "info", "least `level` logged: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	configPath := configFile(*configFlag, os.LookupEnv)
	logw := stderrOf(ctx)
	logger, err := newLogger(logw, *logFormat, *logLevel, writerIsTerminal(logw))
	if err != nil {
		return err
	}
	if *grace < 0 {
		return fmt.Errorf("%w: --grace must be >= 0", errUsage)
	}
	// Before the config: the request-bytes limit's default is sized from
	// the runtime's memory limit.
	memNote := setMemoryLimit(os.LookupEnv)
	cfg, err := loadServeConfig(configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *grace > 0 {
		cfg.ShutdownGrace = *grace
	}
	tp, traceNote, stopTracing, err := tracingFromEnv(ctx, os.LookupEnv)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			logger.Warn("flushing traces", "err", err)
		}
	}()
	opts := []server.Option{server.WithLogger(logger)}
	if tp != nil {
		opts = append(opts, server.WithTracerProvider(tp))
	}
	srv, err := server.New(cfg, opts...)
	if err != nil {
		return err
	}
	if *check {
		fmt.Fprintf(out, "config ok: %s\n", describeUpstreams(srv.Config()))
		return nil
	}
	// SIGHUP reloads the config file: clients, their limits and the
	// upstream keys, without dropping a request; a config that is invalid
	// or changes anything else is refused and logged, the old one stays.
	// (Caught from before the listener opens: an uncaught SIGHUP kills.)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	c := srv.Config()
	fmt.Fprintf(out, "sluice listening on http://%s\n", srv.Addr())
	fmt.Fprintf(out, "  store: %s\n", describeStore(c.Store, configPath == ""))
	fmt.Fprintf(out, "  clients: %s\n", describeClients(c))
	fmt.Fprintf(out, "  traces: %s\n", traceNote)
	fmt.Fprintf(out, "  memory: %s; request bodies in flight up to %s (max_request_bytes_in_flight)\n",
		memNote, formatBytes(c.MaxRequestBytesInFlight))
	for _, u := range c.Upstreams {
		l := u.Limits
		fmt.Fprintf(out, "  /%s/ -> %s (%s, profile %s): %s\n", u.Name, u.BaseURL, u.Protocol, u.Profile,
			describeLimits([4]int64{l.RequestsPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute, l.TokensPerMinute},
				l.MaxConcurrency, max(len(u.APIKeys), 1)))
	}
	logger.Info("sluice started", "listen", srv.Addr(), "store", describeStore(c.Store, false),
		"clients", len(c.Clients), "upstreams", len(c.Upstreams))
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			reloadConfig(srv, configPath, *listen, *grace, logger)
		}
	}
	fmt.Fprintf(out, "shutting down (waiting up to %s for in-flight requests)\n", srv.Config().ShutdownGrace)
	// ctx is already done; shutdown gets its own bound (grace plus a
	// margin for stopping the dispatchers).
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), srv.Config().ShutdownGrace+stopMargin)
	defer cancel()
	if err := srv.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// newLogger returns the gateway's logger on w: format "text" or "json"
// ("" picks text when w is a terminal, JSON otherwise, for a log
// collector), level debug, info, warn or error. A bad value is a usage
// error.
func newLogger(w io.Writer, format, level string, terminal bool) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil || !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(level)) {
		return nil, fmt.Errorf("%w: --log-level must be debug, info, warn or error, not %q", errUsage, level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "" {
		format = "json"
		if terminal {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format must be text or json, not %q", errUsage, format)
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// reloadConfig reads the config again (with the same flag overrides) and
// hands it to the server; a refusal is logged and changes nothing.
func reloadConfig(srv *server.Server, path, listen string, grace time.Duration, logger *slog.Logger) {
	cfg, err := loadServeConfig(path)
	if err != nil {
		srv.ReloadFailed()
	} else {
		if listen != "" {
			cfg.Listen = listen
		}
		if grace > 0 {
			cfg.ShutdownGrace = grace
		}
		err = srv.Reload(cfg)
	}
	if err != nil {
		logger.Error("config reload refused; the running config stays", "err", err)
		return
	}
	logger.Info("config reloaded (clients, limits, upstream keys)", "clients", len(cfg.Clients))
}

func loadServeConfig(path string) (server.Config, error) {
	if path == "" {
		return server.EnvConfig(os.LookupEnv)
	}
	return server.LoadConfig(path, os.LookupEnv)
}

// describeStore names the job store for the banner: an SQLite file by its
// absolute path, a PostgreSQL URL without its password.
func describeStore(dsn string, fromEnv bool) string {
	var d string
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		d = "sqlite:" + path
	default:
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparsable store URL)"
		}
		d = u.Redacted()
	}
	if fromEnv && dsn == server.StoreDefault {
		d += " (the default; set store: in a config file)"
	}
	return d
}

// describeClients says how callers authenticate.
func describeClients(c server.Config) string {
	if len(c.Clients) == 0 {
		return "none configured: every caller is admitted without a key (single tenant; keep the gateway on loopback)"
	}
	names := make([]string, 0, len(c.Clients))
	for _, cl := range c.Clients {
		names = append(names, cl.Name)
	}
	return fmt.Sprintf("%d (%s), a key is required", len(c.Clients), strings.Join(names, ", "))
}

// describeLimits lists an upstream's configured quotas (rpm, itpm, otpm,
// tpm; the rest are learned from the provider's headers), concurrency
// and key count.
func describeLimits(quotas [4]int64, maxConcurrency, keys int) string {
	var parts []string
	for i, name := range []string{"rpm", "itpm", "otpm", "tpm"} {
		if quotas[i] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, quotas[i]))
		}
	}
	quota := "quotas learned from the provider's headers"
	if len(parts) > 0 {
		quota = "limits " + strings.Join(parts, ", ") + " (others learned)"
	}
	return fmt.Sprintf("%s; max_concurrency %d; %d key(s)", quota, maxConcurrency, keys)
}

func describeUpstreams(cfg server.Config) string {
	parts := make([]string, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		parts = append(parts, fmt.Sprintf("/%s/ -> %s (%s, profile %s)", u.Name, u.BaseURL, u.Protocol, u.Profile))
	}
	return fmt.Sprintf("listen %s, %d client(s), upstreams %s", cfg.Listen, len(cfg.Clients), strings.Join(parts, ", "))
}

// setMemoryLimit gives the Go runtime a soft memory limit of
// membudget.DefaultMemoryLimitPercent of the machine's (or cgroup's) memory
// when the environment sets no GOMEMLIMIT, so that garbage from large
// bodies is collected before the process outgrows its memory. It returns
// what it did, for the start-up output.
func setMemoryLimit(lookup server.LookupEnv) string {
	if v, ok := lookup("GOMEMLIMIT"); ok && v != "" {
		return "GOMEMLIMIT=" + v + " (from the environment)"
	}
	limit, ok := membudget.DefaultMemoryLimit()
	if !ok {
		return "no GOMEMLIMIT (the machine's memory could not be read)"
	}
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("GOMEMLIMIT set to %s (%d%% of memory; set GOMEMLIMIT to override)", formatBytes(limit), membudget.DefaultMemoryLimitPercent)
}

// formatBytes writes n in MiB (or bytes below 1 MiB).
func formatBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

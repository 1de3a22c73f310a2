package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

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

func runServe(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	configPath := fs.String("config", "", "YAML config `file` (see docs/config.md); without it, upstreams come from ANTHROPIC_API_KEY / OPENAI_API_KEY")
	listen := fs.String("listen", "", "listen `address`, overriding the config (default "+server.ListenDefault+")")
	grace := fs.Duration("grace", 0, "how long shutdown waits for in-flight requests, overriding the config (default "+server.ShutdownGraceDefault.String()+")")
	check := fs.Bool("check", false, "validate the configuration and exit")
	logFormat := fs.String("log-format", "", "log `format` on stderr: text or json (default text on a terminal, json otherwise)")
	logLevel := fs.String("log-level", "info", "least `level` logged: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	logger, err := newLogger(os.Stderr, *logFormat, *logLevel, isTerminal(os.Stderr))
	if err != nil {
		return err
	}
	if *grace < 0 {
		return fmt.Errorf("%w: --grace must be >= 0", errUsage)
	}
	// Before the config: the request-bytes budget's default is sized from
	// the runtime's memory limit.
	memNote := setMemoryLimit(os.LookupEnv)
	cfg, err := loadServeConfig(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *grace > 0 {
		cfg.ShutdownGrace = *grace
	}
	srv, err := server.New(cfg, server.WithLogger(logger))
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
	fmt.Fprintf(out, "sluice listening on http://%s\n", srv.Addr())
	fmt.Fprintf(out, "  memory: %s; request bodies in flight up to %s (max_request_bytes_in_flight)\n",
		memNote, formatBytes(srv.Config().MaxRequestBytesInFlight))
	for _, u := range srv.Config().Upstreams {
		fmt.Fprintf(out, "  /%s/ -> %s (%s)\n", u.Name, u.BaseURL, u.Protocol)
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-hup:
			reloadConfig(srv, *configPath, *listen, *grace, logger)
		}
	}
	fmt.Fprintf(out, "shutting down (waiting up to %s for in-flight requests)\n", srv.Config().ShutdownGrace)
	// ctx is already done; shutdown gets its own bound (grace plus a
	// margin for stopping the dispatchers).
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), srv.Config().ShutdownGrace+10*time.Second)
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
	if err == nil {
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

func describeUpstreams(cfg server.Config) string {
	parts := make([]string, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		parts = append(parts, fmt.Sprintf("/%s/ -> %s (%s, profile %s)", u.Name, u.BaseURL, u.Protocol, u.Profile))
	}
	return fmt.Sprintf("listen %s, %d client(s), upstreams %s", cfg.Listen, len(cfg.Clients), strings.Join(parts, ", "))
}

// setMemoryLimit gives the Go runtime a soft memory limit of
// server.DefaultMemoryLimitPercent of the machine's (or cgroup's) memory
// when the environment sets no GOMEMLIMIT, so that garbage from large
// bodies is collected before the process outgrows its memory. It returns
// what it did, for the start-up output.
func setMemoryLimit(lookup server.LookupEnv) string {
	if v, ok := lookup("GOMEMLIMIT"); ok && v != "" {
		return "GOMEMLIMIT=" + v + " (from the environment)"
	}
	limit, ok := server.DefaultMemoryLimit()
	if !ok {
		return "no GOMEMLIMIT (the machine's memory could not be read)"
	}
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("GOMEMLIMIT set to %s (%d%% of memory; set GOMEMLIMIT to override)", formatBytes(limit), server.DefaultMemoryLimitPercent)
}

// formatBytes writes n in MiB (or bytes below 1 MiB).
func formatBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

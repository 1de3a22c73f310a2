package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/server"
)

// healthTimeoutDefault bounds one probe of `sluice health`.
const healthTimeoutDefault = 5 * time.Second

func init() {
	register(command{
		name:    "health",
		summary: "probe a running gateway's /livez (or /readyz): exit 0 when it answers 200, 1 otherwise (a container health check)",
		usage:   "[--url URL | --config FILE] [--ready] [--timeout 5s]",
		run:     runHealth,
	})
}

// runHealth probes a gateway once. A distroless or scratch image has no
// curl; the image's HEALTHCHECK runs this instead. Without --url the
// address is the config's listen address (the same file `sluice serve`
// reads: --config, else $SLUICE_CONFIG), an unspecified host (0.0.0.0,
// ::) probed on loopback.
func runHealth(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	target := fs.String("url", "", "`URL` to probe, overriding the address from the config")
	configFlag := fs.String("config", "", "YAML config `file` whose listen address is probed (default $SLUICE_CONFIG; without one "+server.ListenDefault+")")
	ready := fs.Bool("ready", false, "probe /readyz (the gateway should get traffic) instead of /livez (the process serves HTTP)")
	timeout := fs.Duration("timeout", healthTimeoutDefault, "how long the probe may take")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be > 0", errUsage)
	}
	u := *target
	if u == "" {
		listen := server.ListenDefault
		if path := configFile(*configFlag, os.LookupEnv); path != "" {
			cfg, err := server.LoadConfig(path, os.LookupEnv)
			if err != nil {
				return err
			}
			listen = cfg.Listen
		}
		var err error
		if u, err = healthURL(listen, *ready); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%w: --url: %w", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probing: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line := fmt.Sprintf("GET %s: %s %s", u, resp.Status, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return errors.New(line)
	}
	fmt.Fprintln(out, "healthy: "+line)
	return nil
}

// healthURL is the probe's URL for a gateway listening on listen:
// /livez, or /readyz when ready, on loopback when the host is unspecified.
func healthURL(listen string, ready bool) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	path := "/livez"
	if ready {
		path = "/readyz"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

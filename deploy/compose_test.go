package deploy

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// composeFile is the part of deploy/compose.yaml the test reads.
type composeFile struct {
	Services map[string]struct {
		Image           string            `json:"image"`
		Entrypoint      []string          `json:"entrypoint"`
		Command         []string          `json:"command"`
		Environment     map[string]string `json:"environment"`
		Volumes         []string          `json:"volumes"`
		Ports           []string          `json:"ports"`
		StopGracePeriod string            `json:"stop_grace_period"`
		Secrets         []string          `json:"secrets"`
	} `json:"services"`
}

// TestCompose: deploy/compose.yaml agrees with the image (its config path,
// volume and port), with the gateway's config (every ${VAR} it needs is in
// the environment, it passes `sluice serve --check`, the stop grace covers
// shutdown_grace and serve's stop margin), and with Prometheus and Grafana
// (the scrape target and path, the datasource, the dashboards' mount).
func TestCompose(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t)
	_, margin := serveFlags(t, bin)
	var cf composeFile
	readYAML(t, repoFile("deploy", "compose.yaml"), &cf)
	for _, name := range []string{"sluice", "postgres", "prometheus", "grafana"} {
		require.Contains(t, cf.Services, name)
	}
	stages, err := parseDockerfile(repoFile("Dockerfile"))
	require.NoError(t, err)
	icfg, _, err := imageFromStage(stages[len(stages)-1])
	require.NoError(t, err)

	// The gateway: its config mounted where the image reads it, its data
	// in the image's volume, its port published.
	gw := cf.Services["sluice"]
	var cfgSrc string
	var dataMounted bool
	for _, v := range gw.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst = strings.TrimSuffix(dst, ":ro")
		if dst == envMap(icfg.Env)["SLUICE_CONFIG"] {
			cfgSrc = src
		}
		if _, ok := icfg.Volumes[dst]; ok {
			dataMounted = true
		}
	}
	require.NotEmpty(t, cfgSrc, "the config is mounted at the image's SLUICE_CONFIG")
	require.True(t, dataMounted, "the image's volume is a named volume")
	cfgPath := repoFile("deploy", cfgSrc)
	cfgText, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	var cfg struct {
		Listen        string `json:"listen"`
		ShutdownGrace string `json:"shutdown_grace"`
	}
	require.NoError(t, yaml.Unmarshal(cfgText, &cfg))
	_, port, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	require.Contains(t, icfg.ExposedPorts, port+"/tcp")
	require.Contains(t, gw.Ports, port+":"+port)

	env := []string{}
	interp := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?[^}]*\}`)
	for k, v := range gw.Environment {
		// Compose's own interpolation, the shell unset: ${VAR:-default} is
		// the default, ${VAR} and ${VAR:?…} a value as a user gives it.
		v = interp.ReplaceAllStringFunc(v, func(ref string) string {
			if m := interp.FindStringSubmatch(ref); strings.Contains(ref, ":-") {
				return m[2]
			}
			return "test-" + strings.ToLower(k)
		})
		env = append(env, k+"="+v)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-)?`).FindAllStringSubmatch(string(cfgText), -1) {
		if m[2] == "" {
			require.Contains(t, gw.Environment, m[1], "the config needs ${%s}: set it in the sluice service's environment", m[1])
		}
	}
	check := exec.CommandContext(t.Context(), bin, "serve", "--config", cfgPath, "--check")
	check.Env = env
	out, err := check.CombinedOutput()
	require.NoError(t, err, "%s", out)

	grace, err := time.ParseDuration(cfg.ShutdownGrace)
	require.NoError(t, err)
	stop, err := time.ParseDuration(gw.StopGracePeriod)
	require.NoError(t, err, "stop_grace_period is set (Docker's default, 10s, cuts the shutdown grace)")
	require.GreaterOrEqual(t, stop, grace+margin, "stop_grace_period covers shutdown_grace and serve's stop margin")

	// The mock profile runs real flags of `sluice mock` on the port the
	// file's comment points ANTHROPIC_BASE_URL at.
	mock := cf.Services["mock"]
	require.Equal(t, gw.Image, mock.Image)
	mockHelp, err := exec.CommandContext(t.Context(), bin, "mock", "-h").CombinedOutput()
	require.NoError(t, err, "%s", mockHelp)
	for _, a := range mock.Command {
		if strings.HasPrefix(a, "--") {
			require.Contains(t, string(mockHelp), "\n  -"+strings.TrimPrefix(a, "--")+" ", "sluice mock has flag %s", a)
		}
	}
	require.Equal(t, "mock", mock.Entrypoint[len(mock.Entrypoint)-1])
	_, mockPort, err := net.SplitHostPort(argValue(mock.Command, "listen"))
	require.NoError(t, err)
	composeText, err := os.ReadFile(repoFile("deploy", "compose.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(composeText), "ANTHROPIC_BASE_URL=http://mock:"+mockPort)

	// Prometheus scrapes the gateway's /metrics on its port, by service name.
	var prom struct {
		ScrapeConfigs []struct {
			MetricsPath   string `json:"metrics_path"`
			Authorization struct {
				Type            string `json:"type"`
				CredentialsFile string `json:"credentials_file"`
			} `json:"authorization"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, repoFile("deploy", "prometheus", "prometheus.yml"), &prom)
	require.Len(t, prom.ScrapeConfigs, 1)
	sc := prom.ScrapeConfigs[0]
	require.Equal(t, []string{"sluice:" + port}, sc.StaticConfigs[0].Targets)
	require.Equal(t, http.StatusUnauthorized, gatewayStatus(t, bin, sc.MetricsPath), "GET %s without a key", sc.MetricsPath)
	require.Equal(t, http.StatusOK, gatewayStatus(t, bin, sc.MetricsPath, testScrapeKey), "GET %s with the scrape key", sc.MetricsPath)
	// Prometheus sends the key the gateway checks: the scrape_key secret,
	// from the variable the config's metrics.scrape_key names.
	require.Equal(t, "Bearer", sc.Authorization.Type)
	require.Equal(t, "/run/secrets/scrape_key", sc.Authorization.CredentialsFile)
	require.Contains(t, string(cfgText), "scrape_key: ${SLUICE_SCRAPE_KEY}")
	require.Contains(t, gw.Environment, "SLUICE_SCRAPE_KEY")
	require.Contains(t, string(composeText), "scrape_key:\n    environment: SLUICE_SCRAPE_KEY")
	require.Contains(t, cf.Services["prometheus"].Secrets, "scrape_key")
	require.True(t, slices.ContainsFunc(cf.Services["prometheus"].Volumes, func(v string) bool {
		return strings.HasPrefix(v, "./prometheus/prometheus.yml:")
	}))

	// Grafana: the datasource is that Prometheus; the dashboards' folder is
	// mounted where the provider reads it.
	var ds struct {
		Datasources []struct{ Type, URL string } `json:"datasources"`
	}
	readYAML(t, repoFile("deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
	require.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL)
	require.Contains(t, cf.Services["prometheus"].Ports, "9090:9090")
	var prov struct {
		Providers []struct {
			Options struct{ Path string } `json:"options"`
		} `json:"providers"`
	}
	readYAML(t, repoFile("deploy", "grafana", "provisioning", "dashboards", "sluice.yaml"), &prov)
	mounted := map[string]string{}
	for _, v := range cf.Services["grafana"].Volumes {
		src, dst, _ := strings.Cut(v, ":")
		mounted[strings.TrimSuffix(dst, ":ro")] = src
	}
	require.Equal(t, "./grafana/provisioning", mounted["/etc/grafana/provisioning"])
	dashDir, ok := mounted[prov.Providers[0].Options.Path]
	require.True(t, ok, "the dashboards' folder %s is mounted", prov.Providers[0].Options.Path)
	require.FileExists(t, repoFile("deploy", path.Join(dashDir, "sluice.json")))

	// The commands docs/deploy.md and the file's own comments give run as
	// written: each sets every variable the file requires (${VAR:?…}).
	deployDoc, err := os.ReadFile(repoFile("docs", "deploy.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(deployDoc), "\n## Docker Compose\n")
	require.True(t, ok, "docs/deploy.md has a Docker Compose section")
	section, _, _ = strings.Cut(section, "\n## ")
	var comments strings.Builder
	for line := range strings.SplitSeq(string(composeText), "\n") {
		if c, ok := strings.CutPrefix(line, "#"); ok {
			comments.WriteString(strings.TrimPrefix(c, " ") + "\n")
		}
	}
	required := requiredComposeVars(string(composeText))
	require.Contains(t, required, "SLUICE_SCRAPE_KEY")
	for where, text := range map[string]string{"docs/deploy.md": shBlocks(section), "deploy/compose.yaml's comments": comments.String()} {
		cmds := composeCommands(text)
		require.NotEmpty(t, cmds, "%s gives docker compose commands", where)
		for _, c := range cmds {
			for _, v := range required {
				require.Contains(t, c.set, v, "%s: `%s` leaves %s unset, which deploy/compose.yaml requires", where, c.line, v)
			}
		}
	}
}

// requiredComposeVars lists the variables a compose file interpolates as
// ${VAR:?message}: Compose refuses to start without them.
func requiredComposeVars(compose string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):\?`).FindAllStringSubmatch(compose, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// shBlocks is the ```sh blocks of a Markdown text, separated by a line
// "---" (a new shell).
func shBlocks(md string) string {
	var b strings.Builder
	for _, part := range strings.Split(md, "```sh\n")[1:] {
		code, _, _ := strings.Cut(part, "```")
		b.WriteString(code + "---\n")
	}
	return b.String()
}

// composeCommand is one `docker compose` command line and the variables
// set for it: exported earlier in its shell (a line "---" starts a new
// one; a blank line too, in comments) or assigned before the command.
type composeCommand struct {
	line string
	set  []string
}

// composeCommands reads the docker compose commands of shell text.
func composeCommands(text string) []composeCommand {
	assign := regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=`)
	var out []composeCommand
	var exported []string
	text = strings.ReplaceAll(text, "\\\n", " ")
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "---" || line == "":
			exported = nil
		case strings.HasPrefix(line, "export "):
			for _, m := range assign.FindAllStringSubmatch(line, -1) {
				exported = append(exported, m[1])
			}
		case strings.Contains(line, "docker compose"):
			prefix, _, _ := strings.Cut(line, "docker compose")
			set := slices.Clone(exported)
			for _, m := range assign.FindAllStringSubmatch(prefix, -1) {
				set = append(set, m[1])
			}
			out = append(out, composeCommand{line: line, set: set})
		}
	}
	return out
}

// TestDashboard: every query of the Grafana dashboard names metrics the
// gateway registers (the sluice_ names in internal/'s source, a
// histogram's _bucket, _sum and _count series only for histograms), so no
// panel waits for a metric that does not exist.
func TestDashboard(t *testing.T) {
	t.Parallel()
	registered, histograms := registeredMetrics(t)
	data, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "sluice.json"))
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(data, &dash))
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	require.Greater(t, len(exprs), 10, "the dashboard's queries were found")
	names := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, e := range exprs {
		ms := names.FindAllString(e, -1)
		require.NotEmpty(t, ms, "query %q names a sluice_ metric", e)
		for _, n := range ms {
			if base, ok := cutAny(n, "_bucket", "_sum", "_count"); ok && histograms[base] {
				n = base
			}
			require.True(t, registered[n], "query %q: %s is not a metric the gateway registers", e, n)
			used[n] = true
		}
	}
	t.Logf("%d queries over %d of the gateway's %d metrics", len(exprs), len(used), len(registered))
}

// registeredMetrics greps internal/'s non-test Go source for the metric
// names the gateway registers, and which of them are histograms.
func registeredMetrics(t *testing.T) (all, histograms map[string]bool) {
	t.Helper()
	all, histograms = map[string]bool{}, map[string]bool{}
	nameRE := regexp.MustCompile(`"(sluice_[a-z0-9_]*[a-z0-9])"`)
	histRE := regexp.MustCompile(`HistogramOpts\{\s*Name:\s*"(sluice_[a-z0-9_]+)"`)
	err := filepath.WalkDir(repoFile("internal"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range nameRE.FindAllSubmatch(src, -1) {
			all[string(m[1])] = true
		}
		for _, m := range histRE.FindAllSubmatch(src, -1) {
			histograms[string(m[1])] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, all["sluice_requests_total"] && histograms["sluice_queue_wait_seconds"], "the metric names were found")
	return all, histograms
}

func cutAny(s string, suffixes ...string) (string, bool) {
	for _, suf := range suffixes {
		if base, ok := strings.CutSuffix(s, suf); ok {
			return base, true
		}
	}
	return s, false
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, v), file)
}

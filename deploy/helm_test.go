package deploy

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

var chartDir = repoFile("deploy", "helm", "sluice")

// helmCase is one way to install the chart: a values example, or the
// defaults with what `helm install --set` would add.
type helmCase struct {
	name       string
	valuesFile string         // in chartDir; "" for values.yaml alone
	set        map[string]any // like --set
}

var helmCases = []helmCase{
	{name: "defaults", set: map[string]any{"secret": map[string]any{"env": map[string]any{
		"ANTHROPIC_API_KEY": "sk-ant-test", "SLUICE_KEY": "ck-test"}}}},
	{name: "sqlite", valuesFile: "values-sqlite.yaml"},
	{name: "postgres", valuesFile: "values-postgres.yaml"},
}

// TestHelmChart lints and renders the chart with Helm v3 (the library the
// helm command is made of: `helm lint` and `helm template`) for each values
// example, then checks what it rendered against the real binary: the
// container's arguments are flags of `sluice serve` and, with the
// rendered ConfigMap's sluice.yaml and the Secret's variables, pass
// `sluice serve --check`; every probe path is a route a running gateway
// answers 200 on, on the port the config listens on; the pod's
// termination grace covers the preStop sleep, shutdown_grace and serve's
// stop margin; the pod runs as the image's user; the PDB and Service select
// the pods.
func TestHelmChart(t *testing.T) {
	t.Parallel()
	bin := staticBinary(t)
	flags, margin := serveFlags(t, bin)
	for _, hc := range helmCases {
		t.Run(hc.name, func(t *testing.T) {
			t.Parallel()
			vals := map[string]any{}
			if hc.valuesFile != "" {
				var err error
				vals, err = chartutil.ReadValuesFile(filepath.Join(chartDir, hc.valuesFile))
				require.NoError(t, err)
			}
			vals = chartutil.CoalesceTables(maps.Clone(hc.set), vals)

			lint := action.NewLint()
			lint.Strict = true
			res := lint.Run([]string{chartDir}, vals)
			for _, m := range res.Messages {
				require.Less(t, m.Severity, support.WarningSev, "helm lint: %s", m)
			}
			require.Empty(t, res.Errors, "helm lint")

			objs := renderChart(t, vals)
			checkRendered(t, hc, bin, flags, margin, objs)
		})
	}
}

// TestHelmChartRefusesSQLiteReplicas: SQLite is one file on one volume.
func TestHelmChartRefusesSQLiteReplicas(t *testing.T) {
	t.Parallel()
	_, err := render(map[string]any{"replicaCount": 3})
	require.ErrorContains(t, err, "replicaCount > 1 needs a shared store")
	_, err = render(map[string]any{"config": map[string]any{"listen": "0.0.0.0:9000"}})
	require.ErrorContains(t, err, "config.listen: set port instead")
}

// TestHelmChartSetsExpectedNodes: with several replicas the chart sets
// cluster.expected_nodes to replicaCount, keeping the config's other
// cluster fields, unless the config sets it; one replica leaves the
// config's cluster section as it is.
func TestHelmChartSetsExpectedNodes(t *testing.T) {
	t.Parallel()
	pg, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values-postgres.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		replicas int
		cluster  map[string]any // config.cluster
		want     map[string]any // the rendered cluster section (nil: none)
	}{
		{"five replicas", 5, nil, map[string]any{"expected_nodes": float64(5)}},
		{"other cluster fields kept", 4, map[string]any{"sync_interval": "250ms"},
			map[string]any{"expected_nodes": float64(4), "sync_interval": "250ms"}},
		{"the config's own value wins", 3, map[string]any{"expected_nodes": 6}, map[string]any{"expected_nodes": float64(6)}},
		{"one replica", 1, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := map[string]any{"replicaCount": tc.replicas}
			if tc.cluster != nil {
				set["config"] = map[string]any{"cluster": tc.cluster}
			}
			vals := chartutil.CoalesceTables(set, maps.Clone(pg))
			cm := decode[corev1.ConfigMap](t, renderChart(t, vals), "ConfigMap/sluice")
			var cfg struct {
				Cluster map[string]any `json:"cluster"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(cm.Data["sluice.yaml"]), &cfg))
			require.Equal(t, tc.want, cfg.Cluster, cm.Data["sluice.yaml"])
		})
	}
}

// render is `helm template sluice deploy/helm/sluice` with vals.
func render(vals map[string]any) (string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "sluice", "default"
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// renderChart renders the chart: each object's YAML by "Kind/name" (the
// release is named sluice, so its objects are "sluice" and
// "sluice-dashboard").
func renderChart(t *testing.T, vals map[string]any) map[string][]byte {
	t.Helper()
	manifest, err := render(vals)
	require.NoError(t, err, "helm template")
	objs := map[string][]byte{}
	for _, doc := range strings.Split(manifest, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta), doc)
		key := meta.Kind + "/" + meta.Metadata.Name
		require.NotContains(t, objs, key)
		objs[key] = []byte(doc)
	}
	return objs
}

func decode[T any](t *testing.T, objs map[string][]byte, kind string) *T {
	t.Helper()
	doc, ok := objs[kind]
	require.True(t, ok, "%s is rendered", kind)
	var v T
	require.NoError(t, yaml.UnmarshalStrict(doc, &v), "%s", doc)
	return &v
}

func checkRendered(t *testing.T, hc helmCase, bin string, flags map[string]bool, margin time.Duration, objs map[string][]byte) {
	dep := decode[appsv1.Deployment](t, objs, "Deployment/sluice")
	cm := decode[corev1.ConfigMap](t, objs, "ConfigMap/sluice")
	svc := decode[corev1.Service](t, objs, "Service/sluice")
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	ctr := pod.Containers[0]

	// The config file: mounted where --config points.
	cfgArg := argValue(ctr.Args, "config")
	require.NotEmpty(t, cfgArg, "the container names its config")
	var cfgMount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if strings.HasPrefix(cfgArg, m.MountPath+"/") {
			cfgMount = &ctr.VolumeMounts[i]
		}
	}
	require.NotNil(t, cfgMount, "--config %s is in a mounted volume", cfgArg)
	vol := volumeNamed(t, pod, cfgMount.Name)
	require.NotNil(t, vol.ConfigMap)
	require.Equal(t, cm.Name, vol.ConfigMap.Name)
	cfgText, ok := cm.Data[strings.TrimPrefix(cfgArg, cfgMount.MountPath+"/")]
	require.True(t, ok, "the ConfigMap holds %s", cfgArg)
	var cfg struct {
		Listen        string `json:"listen"`
		Store         string `json:"store"`
		ShutdownGrace string `json:"shutdown_grace"`
		Cluster       struct {
			ExpectedNodes *int `json:"expected_nodes"`
		} `json:"cluster"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(cfgText), &cfg))
	// A replica that starts before the shared store answers runs on
	// 1/expected_nodes of each quota: the replicas, not the default 1.
	if *dep.Spec.Replicas > 1 {
		require.NotNil(t, cfg.Cluster.ExpectedNodes, "cluster.expected_nodes is set with %d replicas:\n%s", *dep.Spec.Replicas, cfgText)
		require.Equal(t, int(*dep.Spec.Replicas), *cfg.Cluster.ExpectedNodes, "cluster.expected_nodes follows replicaCount")
	}

	// The arguments: flags of sluice serve.
	for _, a := range ctr.Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		require.True(t, strings.HasPrefix(a, "-") && flags[name], "container argument %s is not a flag of sluice serve", a)
	}

	// The environment the config's ${VAR}s need.
	provided := map[string]string{}
	if sec, ok := objs["Secret/sluice"]; ok {
		var s corev1.Secret
		require.NoError(t, yaml.UnmarshalStrict(sec, &s))
		for k := range s.StringData {
			provided[k] = "test-" + strings.ToLower(k)
		}
	}
	for _, e := range ctr.EnvFrom {
		require.NotNil(t, e.SecretRef)
		if _, made := objs["Secret/sluice"]; !made {
			// An existing Secret: the variables the example's
			// `kubectl create secret` comment gives it.
			for _, name := range documentedSecretKeys(t, hc.valuesFile) {
				provided[name] = "test-" + strings.ToLower(name)
			}
		}
	}
	for _, e := range ctr.Env {
		provided[e.Name] = cmp.Or(e.Value, "test")
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-)?`).FindAllStringSubmatch(cfgText, -1) {
		if m[2] == "" {
			require.Contains(t, provided, m[1], "the config needs ${%s}: give it in the Secret", m[1])
		}
	}

	// sluice serve --check with the rendered arguments, config and env.
	cfgFile := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfgText), 0o600))
	args := []string{"serve"}
	for _, a := range ctr.Args {
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + cfgFile
		}
		args = append(args, a)
	}
	check := exec.CommandContext(t.Context(), bin, append(args, "--check")...)
	check.Env = []string{}
	for k, v := range provided {
		check.Env = append(check.Env, k+"="+v)
	}
	out, err := check.CombinedOutput()
	require.NoError(t, err, "sluice %s --check:\n%s", strings.Join(args, " "), out)
	require.Contains(t, string(out), "config ok: listen "+cfg.Listen)

	// The port: the config listens on the container's port "http", which
	// the probes and the Service use.
	_, port, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	require.Len(t, ctr.Ports, 1)
	require.Equal(t, "http", ctr.Ports[0].Name)
	require.Equal(t, port, strconv.Itoa(int(ctr.Ports[0].ContainerPort)), "the container port is where the config listens")
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
	require.Equal(t, dep.Spec.Template.Labels, withKeys(dep.Spec.Template.Labels, svc.Spec.Selector), "the Service selects the pods")

	// The probes: real routes, answered 200 by a fresh gateway.
	for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe} {
		require.NotNil(t, p, name)
		require.NotNil(t, p.HTTPGet, name)
		require.Equal(t, "http", p.HTTPGet.Port.String(), "%s probe port", name)
		require.Equal(t, http.StatusOK, gatewayStatus(t, bin, p.HTTPGet.Path), "%s probe GET %s", name, p.HTTPGet.Path)
	}
	require.Equal(t, "/livez", ctr.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path)

	// Termination: preStop sleep, then SIGTERM, then up to shutdown_grace
	// and serve's stop margin before the process exits.
	grace, err := time.ParseDuration(cfg.ShutdownGrace)
	require.NoError(t, err)
	var sleep time.Duration
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil {
		require.NotNil(t, ctr.Lifecycle.PreStop.Sleep, "a scratch image has no shell for an exec preStop")
		sleep = time.Duration(ctr.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	require.Equal(t, sleep+grace+margin, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second,
		"terminationGracePeriodSeconds = preStop sleep + shutdown_grace + sluice serve's stop margin")

	// The image's user and volume.
	stages, err := parseDockerfile(repoFile("Dockerfile"))
	require.NoError(t, err)
	icfg, _, err := imageFromStage(stages[len(stages)-1])
	require.NoError(t, err)
	uid, gid, err := parseUser(icfg.User)
	require.NoError(t, err)
	require.NotNil(t, pod.SecurityContext.RunAsUser)
	require.Equal(t, int64(uid), *pod.SecurityContext.RunAsUser, "the pod runs as the image's user")
	require.Equal(t, int64(gid), *pod.SecurityContext.FSGroup, "volumes are writable by the image's group")
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	var dataMount *corev1.VolumeMount
	for i, m := range ctr.VolumeMounts {
		if _, ok := icfg.Volumes[m.MountPath]; ok {
			dataMount = &ctr.VolumeMounts[i]
		}
	}
	require.NotNil(t, dataMount, "the image's volume %v is mounted (the root file system is read-only)", slices.Collect(maps.Keys(icfg.Volumes)))
	require.True(t, *ctr.SecurityContext.ReadOnlyRootFilesystem)
	data := volumeNamed(t, pod, dataMount.Name)
	if path, ok := strings.CutPrefix(cfg.Store, "sqlite:"); ok {
		require.True(t, strings.HasPrefix(path, dataMount.MountPath+"/"), "the SQLite store %s is in the data volume", path)
		require.NotNil(t, data.PersistentVolumeClaim, "the SQLite store is on a PersistentVolumeClaim")
		require.Equal(t, int32(1), *dep.Spec.Replicas)
		require.Equal(t, appsv1.RecreateDeploymentStrategyType, dep.Spec.Strategy.Type, "one ReadWriteOnce volume")
		decode[corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim/sluice")
	} else {
		require.Greater(t, *dep.Spec.Replicas, int32(1), "the PostgreSQL example runs a cluster")
		require.NotNil(t, data.EmptyDir)
	}

	// The disruption budget selects the pods.
	pdb := decode[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/sluice")
	require.Equal(t, dep.Spec.Template.Labels, withKeys(dep.Spec.Template.Labels, pdb.Spec.Selector.MatchLabels))

	// The ServiceMonitor scrapes a real route on the Service's port.
	if doc, ok := objs["ServiceMonitor/sluice"]; ok {
		var sm struct {
			Spec struct {
				Selector  struct{ MatchLabels map[string]string } `json:"selector"`
				Endpoints []struct {
					Port, Path    string
					Authorization struct {
						Type        string
						Credentials struct{ Name, Key string }
					}
				} `json:"endpoints"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &sm))
		require.Len(t, sm.Spec.Endpoints, 1)
		require.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
		require.Equal(t, http.StatusUnauthorized, gatewayStatus(t, bin, sm.Spec.Endpoints[0].Path), "/metrics without a key")
		require.Equal(t, http.StatusOK, gatewayStatus(t, bin, sm.Spec.Endpoints[0].Path, testScrapeKey), "/metrics with the scrape key")
		require.Equal(t, "Bearer", sm.Spec.Endpoints[0].Authorization.Type)
		require.NotEmpty(t, ctr.EnvFrom, "the gateway reads its keys from a Secret")
		require.Equal(t, ctr.EnvFrom[0].SecretRef.Name, sm.Spec.Endpoints[0].Authorization.Credentials.Name,
			"the ServiceMonitor reads the scrape key from the Secret the gateway reads (the chart's, or existingSecret)")
		require.Equal(t, "SLUICE_SCRAPE_KEY", sm.Spec.Endpoints[0].Authorization.Credentials.Key)
		require.Contains(t, cfgText, "${SLUICE_SCRAPE_KEY", "the gateway reads the key the ServiceMonitor sends")
		require.Equal(t, svc.Labels, withKeys(svc.Labels, sm.Spec.Selector.MatchLabels), "the ServiceMonitor selects the Service")
	}
	if doc, ok := objs["ConfigMap/sluice-dashboard"]; ok {
		var dash corev1.ConfigMap
		require.NoError(t, yaml.UnmarshalStrict(doc, &dash))
		want, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "sluice.json"))
		require.NoError(t, err)
		require.Equal(t, strings.TrimSpace(string(want)), dash.Data["sluice.json"], "the dashboard ConfigMap holds dashboards/sluice.json")
	}
}

// serveFlags runs `sluice serve -h` and returns its flag names and the stop
// margin its --grace help states.
func serveFlags(t *testing.T, bin string) (map[string]bool, time.Duration) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), bin, "serve", "-h").CombinedOutput()
	require.NoError(t, err, "%s", out)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	require.True(t, flags["config"] && flags["listen"], "%s", out)
	m := regexp.MustCompile(`up to (\S+) more`).FindStringSubmatch(string(out))
	require.NotNil(t, m, "serve -h states its stop margin:\n%s", out)
	margin, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	return flags, margin
}

var (
	gatewayOnce sync.Once
	gatewayURL  string
	errGateway  error
)

// gatewayStatus is the status a freshly started `sluice serve` answers
// GET path with (one gateway for the whole test run, stopped by the
// package's TestMain cleanup).
func gatewayStatus(t *testing.T, bin, path string, bearer ...string) int {
	t.Helper()
	gatewayOnce.Do(func() { gatewayURL, errGateway = startGateway(bin) })
	require.NoError(t, errGateway)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, gatewayURL+path, nil)
	require.NoError(t, err)
	if len(bearer) > 0 {
		req.Header.Set("Authorization", "Bearer "+bearer[0])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// testScrapeKey is the scrape key of the gateway startGateway runs.
const testScrapeKey = "scrape-test-key-0123456789"

// startGateway starts the binary with a minimal config and waits until
// it prints its address; it is killed when the tests end.
func startGateway(bin string) (string, error) {
	dir, err := os.MkdirTemp(tmpRoot, "gateway-")
	if err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: none\nupstreams:\n  - {name: anthropic, protocol: anthropic, api_key: sk-test}\n"+
		"clients:\n  - {name: ops, key: ck-test-admin, role: admin}\nmetrics: {scrape_key: "+testScrapeKey+"}\n"), 0o600); err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "serve", "--config", cfg)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	cleanups = append(cleanups, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	re := regexp.MustCompile(`sluice listening on (http://\S+)`)
	for range 300 {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("sluice serve did not start:\n%s", stderr.String())
}

// documentedSecretKeys are the --from-literal=NAME= of a values example's
// `kubectl create secret` comment.
func documentedSecretKeys(t *testing.T, valuesFile string) []string {
	t.Helper()
	require.NotEmpty(t, valuesFile, "an existing Secret is documented in its values example")
	data, err := os.ReadFile(filepath.Join(chartDir, valuesFile))
	require.NoError(t, err)
	var names []string
	for _, m := range regexp.MustCompile(`--from-literal=([A-Z_][A-Z0-9_]*)=`).FindAllSubmatch(data, -1) {
		names = append(names, string(m[1]))
	}
	require.NotEmpty(t, names, "%s documents the Secret's keys (kubectl create secret … --from-literal=NAME=…)", valuesFile)
	return names
}

func volumeNamed(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

// argValue is the value of --name=value (or --name value) in args.
func argValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// withKeys returns labels overwritten by selector: equal to labels exactly
// when the selector matches them.
func withKeys(labels, selector map[string]string) map[string]string {
	out := maps.Clone(labels)
	maps.Copy(out, selector)
	return out
}

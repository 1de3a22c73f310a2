package server

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	upcfg "github.com/sluicehq/sluice/upstream"
)

// ErrRestartNeeded means a reloaded configuration changes a field that
// only a restart applies.
var ErrRestartNeeded = errors.New("needs a restart")

// reloadMetrics count the config reloads: sluice_config_reloads_total by
// result and sluice_config_last_reload_successful, so an alert can catch
// a SIGHUP that changed nothing.
type reloadMetrics struct {
	total *prometheus.CounterVec
	last  prometheus.Gauge
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reloads (SIGHUP) by result: applied, or refused (invalid, or a change that needs a restart; the running config stays).",
		}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 when the last config reload was applied (or none was tried), 0 when it was refused.",
		}),
	}
	m.total.WithLabelValues("applied")
	m.total.WithLabelValues("refused")
	m.last.Set(1)
	reg.MustRegister(m.total, m.last)
	return m
}

func (m *reloadMetrics) done(err error) {
	if err != nil {
		m.total.WithLabelValues("refused").Inc()
		m.last.Set(0)
		return
	}
	m.total.WithLabelValues("applied").Inc()
	m.last.Set(1)
}

// keyRotator is implemented by engines whose key pool can take new
// secrets in place (*dispatch.Dispatcher).
type keyRotator interface {
	RotateKeys(secrets []string) error
}

// Reload applies a new configuration without dropping a request in
// flight: the clients (keys, roles, limits, budgets) and the upstreams' keys (new
// secrets for the same number of keys, in order: rotation). Everything
// else (listen, store, an upstream's other fields, jobs, cluster,
// timeouts) is read at start only: a config that changes it is refused
// with ErrRestartNeeded naming the field, as is an invalid one, and the
// running configuration stays whole (nothing is half applied).
//
// Requests already authenticated finish as the client they were; requests
// already sent keep the key they were sent with. Config keeps returning
// the configuration the server started with.
func (s *Server) Reload(next Config) error {
	err := s.reload(next)
	s.reloads.done(err)
	return err
}

// ReloadFailed counts a reload that never reached Reload (the file did
// not load) as refused.
func (s *Server) ReloadFailed() { s.reloads.done(errors.New("not loaded")) }

func (s *Server) reload(next Config) error {
	next = next.WithDefaults()
	if err := next.validate(); err != nil {
		return fmt.Errorf("validating config: %w", err)
	}
	if field := restartField(s.cfg, next); field != "" {
		return fmt.Errorf("%s: changed, and %w (only clients and upstream keys reload)", field, ErrRestartNeeded)
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	// Check every pool first, so that a refusal changes nothing.
	type rotation struct {
		r       keyRotator
		secrets []string
	}
	var rotations []rotation
	for i, uc := range next.Upstreams {
		r, ok := s.upstreams[uc.Name].engine.(keyRotator)
		if !ok {
			continue
		}
		var secrets []string
		for _, k := range uc.Keys() {
			secrets = append(secrets, k.Key)
		}
		if n := len(s.cfg.Upstreams[i].Keys()); n != len(secrets) {
			return fmt.Errorf("upstreams[%d].api_keys: %d keys instead of %d: adding or removing keys %w", i, len(secrets), n, ErrRestartNeeded)
		}
		rotations = append(rotations, rotation{r, secrets})
	}
	for _, rt := range rotations {
		if err := rt.r.RotateKeys(rt.secrets); err != nil {
			return fmt.Errorf("rotating upstream keys: %w", err)
		}
	}
	s.clients.SetConfig(next.Clients)
	return nil
}

// restartField names the first field (YAML path) that differs between a
// and b other than the clients and the upstreams' key secrets, or "".
func restartField(a, b Config) string {
	a, b = withoutReloadable(a), withoutReloadable(b)
	ta := reflect.TypeFor[Config]()
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range ta.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(ta.Field(i).Tag.Get("yaml"), ",")
			if name == "upstreams" {
				for j := range min(len(a.Upstreams), len(b.Upstreams)) {
					if !reflect.DeepEqual(a.Upstreams[j], b.Upstreams[j]) {
						return fmt.Sprintf("upstreams[%d] (%s)", j, a.Upstreams[j].Name)
					}
				}
			}
			return cmpOrName(name, ta.Field(i).Name)
		}
	}
	return ""
}

func cmpOrName(yamlName, goName string) string {
	if yamlName != "" {
		return yamlName
	}
	return goName
}

// withoutReloadable blanks what Reload applies: clients and key secrets.
func withoutReloadable(c Config) Config {
	c.Clients = nil
	ups := make([]upcfg.Config, len(c.Upstreams))
	for i, u := range c.Upstreams {
		u.APIKey = ""
		keys := make([]upcfg.Key, len(u.APIKeys))
		for j, k := range u.APIKeys {
			k.Key = ""
			keys[j] = k
		}
		u.APIKeys = keys
		ups[i] = u
	}
	c.Upstreams = ups
	return c
}

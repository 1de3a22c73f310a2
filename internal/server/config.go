package server

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/membudget"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// Defaults for Config fields.
const (
	// ListenDefault is the address the gateway listens on.
	ListenDefault = "127.0.0.1:8080"
	// StoreDefault is the job-queue store.
	StoreDefault = "sqlite:./sluice.db"
	// StoreNone turns the durable job queue off: the gateway proxies only.
	StoreNone = "none"
	// MaxBodyBytesDefault is the largest request body accepted on a
	// scheduled route: Anthropic's own Messages limit (32 MB).
	MaxBodyBytesDefault = 32 << 20
	// MaxRequestBytesInFlightDefault is the request-bytes limit when the
	// memory available cannot be read (see membudget.DefaultRequestBytes).
	MaxRequestBytesInFlightDefault = 1 << 30
	// RequestBytesWaitDefault is how long a large request waits for room
	// under the request-bytes limit before it is refused with a 503.
	RequestBytesWaitDefault = 2 * time.Second
	// ShutdownGraceDefault is how long Stop lets in-flight requests finish.
	ShutdownGraceDefault = 30 * time.Second
	// ReadTimeoutDefault, WriteTimeoutDefault and IdleTimeoutDefault bound
	// slow clients (Config).
	ReadTimeoutDefault  = 5 * time.Minute
	WriteTimeoutDefault = 2 * time.Minute
	IdleTimeoutDefault  = 2 * time.Minute
	// MaxHeaderBytesDefault bounds a request's headers.
	MaxHeaderBytesDefault = 64 << 10
	// MaxConnectionsDefault caps the open client connections.
	MaxConnectionsDefault = 4096
	// ClientsPollDefault is how often a gateway reads the runtime
	// clients' version from the store: a client created, changed or
	// revoked on another node is in force here within it.
	ClientsPollDefault = 2 * time.Second
)

// Config is the gateway's configuration, read from YAML by LoadConfig or
// built from the environment by EnvConfig.
type Config struct {
	// Listen is the TCP address to serve on. Defaults to 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// AllowPublic permits a non-loopback Listen address when no Clients are
	// configured (any key is then accepted). Defaults to false.
	AllowPublic bool `yaml:"allow_public"`
	// Store is the job-queue store: sqlite:PATH or postgres://... Defaults
	// to sqlite:./sluice.db.
	Store string `yaml:"store"`
	// Jobs tunes the durable job queue (POST /v1/jobs, /v1/batches): the
	// job runtime's own settings (docs/config.md lists the fields).
	// Defaults to the jobs package's defaults; an empty spool_dir to the
	// SQLite file's path plus ".spool", or SpoolDirDefault on PostgreSQL.
	Jobs jobs.Settings `yaml:"jobs"`
	// Cluster shares each upstream's quota, concurrency and pauses with
	// the other nodes using the same shared store (docs/cluster.md). When
	// its Store is empty and the job store is PostgreSQL, sharing is on
	// through the job store's database; on SQLite (or store: none) it is
	// off. Defaults to the cluster package's defaults.
	Cluster admit.ClusterConfig `yaml:"cluster"`
	// MaxBodyBytes is the largest request body accepted on a scheduled
	// route; larger bodies get 413. Defaults to 32 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxRequestBytesInFlight bounds the bytes of request bodies held at
	// once (scheduled routes, POST /v1/jobs and /v1/batches): a request
	// reserves its body's size before the body is read and gives it back
	// when it is finished; when the limit is reached a large request waits up
	// to RequestBytesWait and is then answered 503 with retry-after.
	// Requests under 64 KiB are never refused. Defaults to half of
	// GOMEMLIMIT when it is set, else a quarter of the machine's (or
	// cgroup's) memory, else 1 GiB (membudget.DefaultRequestBytes).
	MaxRequestBytesInFlight int64 `yaml:"max_request_bytes_in_flight"`
	// RequestBytesWait is how long a large request waits for room in
	// MaxRequestBytesInFlight before it is refused. Defaults to 2s.
	RequestBytesWait time.Duration `yaml:"request_bytes_wait"`
	// ShutdownGrace is how long Stop waits for in-flight requests before
	// cutting them off. Defaults to 30s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request line and headers (slowloris). Defaults to 30s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included. Defaults
	// to 5m.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing an answer on the gateway's own routes
	// (jobs API, status, metrics). The provider routes and batch results
	// clear it: a stream lasts as long as the generation, which the
	// upstream's request_timeout bounds. Defaults to 2m (above the jobs
	// API's longest wait, 60s).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle that long. Defaults
	// to 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers; larger requests
	// get a JSON 431 (Go's plain-text 431 beyond 4 × this, the
	// http.Server's own limit). Defaults to 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps the client connections open at once; a
	// connection beyond it is answered 503 (overloaded_error,
	// retry-after: 1) and closed. Negative means no cap. Defaults to 4096.
	MaxConnections int `yaml:"max_connections"`
	// Upstreams are the provider APIs, each served under /{name}/, each
	// defaulted and validated by package upstream (docs/config.md lists
	// the fields). At least one is required. Defaults to none.
	Upstreams []upcfg.Config `yaml:"upstreams"`
	// Clients are the callers allowed in, each with its own key. With none,
	// any key is accepted. Defaults to none.
	Clients []clients.Config `yaml:"clients"`
	// ClientsPoll is how often the gateway reads the store for clients
	// created, changed or revoked through the admin API on any node
	// (/v1/clients). Defaults to 2s.
	ClientsPoll time.Duration `yaml:"clients_poll"`
	// Metrics guards GET /metrics (metrics_auth.go). Defaults to an admin
	// key being needed whenever clients are configured.
	Metrics MetricsConfig `yaml:"metrics"`
	// Prices is the price table that costs requests for spend budgets and
	// the spend metrics (docs/budgets.md). Defaults to the shipped table
	// (pricing.Shipped), unknown models priced at its dearest price.
	Prices admit.Prices `yaml:"prices"`
}

// LookupEnv reads an environment variable; os.LookupEnv in production.
type LookupEnv = configfile.Lookup

// LoadConfig reads, expands, defaults and validates the YAML file at path.
// A mistake in the file is a *configfile.Error: one line naming the file,
// the line, the field's YAML path and what to change.
func LoadConfig(path string, lookup LookupEnv) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	cfg, err := ParseConfig(data, lookup)
	if err != nil {
		return Config{}, configfile.InFile(err, path)
	}
	return cfg, nil
}

// ParseConfig reads YAML config: ${VAR} and ${VAR:-default} are expanded in
// every value (an unset VAR without a default is an error naming it),
// unknown fields and values of the wrong kind are rejected, and the result
// is defaulted and validated. Every error is a *configfile.Error with the
// line and the YAML path of the field at fault.
func ParseConfig(data []byte, lookup LookupEnv) (Config, error) {
	root, err := configfile.Parse(data)
	if err != nil {
		return Config{}, err
	}
	if err := configfile.Expand(root, lookup); err != nil {
		return Config{}, err
	}
	if err := configfile.Check(root, reflect.TypeFor[Config](), ConfigEnums()); err != nil {
		return Config{}, err
	}
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		// Check takes every value the decoder takes; this is a backstop.
		return Config{}, &configfile.Error{Msg: "decoding: " + err.Error(), Err: err}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, configfile.At(root, err)
	}
	return cfg, nil
}

// EnvConfig is the configuration used without a config file: an anthropic
// upstream when ANTHROPIC_API_KEY is set and an openai one when
// OPENAI_API_KEY is set, no clients, everything else defaulted.
func EnvConfig(lookup LookupEnv) (Config, error) {
	var cfg Config
	if key, ok := lookup("ANTHROPIC_API_KEY"); ok && key != "" {
		cfg.Upstreams = append(cfg.Upstreams, upcfg.Config{Name: "anthropic", Protocol: llm.Anthropic, APIKey: key})
	}
	if key, ok := lookup("OPENAI_API_KEY"); ok && key != "" {
		cfg.Upstreams = append(cfg.Upstreams, upcfg.Config{Name: "openai", Protocol: llm.OpenAI, APIKey: key})
	}
	if len(cfg.Upstreams) == 0 {
		return Config{}, errors.New("no upstream: set ANTHROPIC_API_KEY and/or OPENAI_API_KEY, or pass --config FILE (see docs/config.md)")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Listen = cmp.Or(c.Listen, ListenDefault)
	c.Store = cmp.Or(c.Store, StoreDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, IdleTimeoutDefault)
	c.MaxHeaderBytes = cmp.Or(c.MaxHeaderBytes, MaxHeaderBytesDefault)
	c.MaxConnections = cmp.Or(c.MaxConnections, MaxConnectionsDefault)
	if c.MaxRequestBytesInFlight == 0 {
		c.MaxRequestBytesInFlight = membudget.DefaultRequestBytes(MaxRequestBytesInFlightDefault, SmallRequestBytes)
	}
	c.RequestBytesWait = cmp.Or(c.RequestBytesWait, RequestBytesWaitDefault)
	c.ClientsPoll = cmp.Or(c.ClientsPoll, ClientsPollDefault)
	c.Jobs = c.Jobs.WithDefaults()
	c.Cluster = c.Cluster.WithDefaults()
	c.Upstreams = append([]upcfg.Config(nil), c.Upstreams...)
	for i, u := range c.Upstreams {
		c.Upstreams[i] = u.WithDefaults()
	}
	c.Prices = c.Prices.WithDefaults()
	c.Clients = append([]clients.Config(nil), c.Clients...)
	for i, cl := range c.Clients {
		c.Clients[i] = cl.WithDefaults()
	}
	return c
}

// reservedNames are first path segments the server itself serves.
var reservedNames = map[string]bool{"v1": true, "healthz": true, "livez": true, "readyz": true, "metrics": true, "ui": true}

// validate reports the first invalid field, named by its YAML path.
func (c Config) validate() error {
	if err := validateListen(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := validateStore(c.Store); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := c.Jobs.Validate(); err != nil {
		return fmt.Errorf("jobs.%w", err)
	}
	if err := c.Cluster.Validate(); err != nil {
		return fmt.Errorf("cluster.%w", err)
	}
	if c.MaxBodyBytes < 0 {
		return errors.New("max_body_bytes: must be >= 0")
	}
	if c.MaxRequestBytesInFlight < SmallRequestBytes {
		return fmt.Errorf("max_request_bytes_in_flight: must be at least %d (64 KiB)", SmallRequestBytes)
	}
	if c.RequestBytesWait < 0 {
		return errors.New("request_bytes_wait: must be >= 0")
	}
	if c.ClientsPoll < 0 {
		return errors.New("clients_poll: must be >= 0")
	}
	if err := c.Metrics.validate(); err != nil {
		return fmt.Errorf("metrics.%w", err)
	}
	if c.ShutdownGrace < 0 {
		return errors.New("shutdown_grace: must be >= 0")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", c.ReadHeaderTimeout}, {"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s: must be >= 0", d.name)
		}
	}
	if c.MaxHeaderBytes < 1024 {
		return errors.New("max_header_bytes: must be at least 1024")
	}
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one upstream is required")
	}
	names := map[string]bool{}
	for i, u := range c.Upstreams {
		if err := validateUpstream(u); err != nil {
			return fmt.Errorf("upstreams[%d].%w", i, err)
		}
		if names[u.Name] {
			return fmt.Errorf("upstreams[%d].name: duplicate upstream %q", i, u.Name)
		}
		names[u.Name] = true
	}
	for i, u := range c.Upstreams {
		for j, f := range u.Fallbacks {
			to, ok := upstreamNamed(c.Upstreams, f.Upstream)
			if !ok {
				return fmt.Errorf("upstreams[%d].fallbacks[%d].upstream: no upstream is named %q", i, j, f.Upstream)
			}
			if to.Protocol != u.Protocol {
				return fmt.Errorf("upstreams[%d].fallbacks[%d].upstream: %q speaks %s, not %s (same protocol only)", i, j, f.Upstream, to.Protocol, u.Protocol)
			}
		}
	}
	if err := clients.Validate(c.Clients, names); err != nil {
		return fmt.Errorf("clients%w", err)
	}
	if err := c.Prices.Validate(); err != nil {
		return fmt.Errorf("prices.%w", err)
	}
	if len(c.Clients) == 0 && !c.AllowPublic && !isLoopback(c.Listen) {
		return fmt.Errorf("listen: %s is not a loopback address and no clients are configured, so anyone could use the upstream keys: configure clients or set allow_public: true", c.Listen)
	}
	return nil
}

// validateUpstream adds the gateway's rules to upstream.Config's
// Validate: a route name the gateway does not serve itself, and a key. The
// error's text starts with the field name, so that Config.validate can
// prefix it with "upstreams[i].".
func validateUpstream(u upcfg.Config) error {
	if err := u.Validate(); err != nil {
		return err
	}
	if reservedNames[u.Name] {
		return fmt.Errorf("name: %q is reserved for the gateway's own routes", u.Name)
	}
	if !u.HasKey() {
		return errors.New("api_key: required (e.g. api_key: ${ANTHROPIC_API_KEY}, or api_keys: [...])")
	}
	return nil
}

func validateListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	_ = host
	if port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	return nil
}

// isLoopback reports whether addr only listens on the loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validateStore(s string) error {
	switch {
	case s == StoreNone:
		return nil
	case strings.HasPrefix(s, "sqlite:"):
		if strings.TrimPrefix(s, "sqlite:") == "" {
			return errors.New("sqlite: needs a path, e.g. sqlite:./sluice.db")
		}
		return nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("invalid PostgreSQL URL: %w", redactURLError(err))
		}
		if u.Host == "" {
			return errors.New("PostgreSQL URL needs a host, e.g. postgres://user@127.0.0.1:5432/sluice")
		}
		return nil
	}
	return fmt.Errorf("%q: want sqlite:PATH or postgres://USER@HOST/DB", redact(s))
}

// redactURLError drops the URL (which may hold a password) from a parse
// error.
func redactURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// redact hides all but the scheme of a store string in error messages.
func redact(s string) string {
	if i := strings.Index(s, ":"); i >= 0 && i < 16 {
		return s[:i+1] + "..."
	}
	return "..."
}

func upstreamNamed(us []upcfg.Config, name string) (upcfg.Config, bool) {
	for _, u := range us {
		if u.Name == name {
			return u, true
		}
	}
	return upcfg.Config{}, false
}

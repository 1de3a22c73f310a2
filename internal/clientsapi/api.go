package clientsapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// Store is what the API needs of the job store, where runtime clients are
// kept (jobstore.Store implements it).
type Store interface {
	CreateClient(ctx context.Context, p jobstore.CreateClientParams) (*jobstore.StoredClient, error)
	GetClient(ctx context.Context, name string) (*jobstore.StoredClient, error)
	ListClients(ctx context.Context) ([]*jobstore.StoredClient, error)
	UpdateClient(ctx context.Context, p jobstore.UpdateClientParams) (*jobstore.StoredClient, error)
	DeleteClient(ctx context.Context, p jobstore.DeleteClientParams) error
}

// Config configures an API.
type Config struct {
	// Registry is the clients in force on this gateway: the config's are
	// listed and protected from change, the caller is authenticated
	// against them. Required.
	Registry *clients.Registry
	// Authenticate identifies the client that sent r (the server reads
	// its key from the headers). Required.
	Authenticate func(r *http.Request) (clients.Client, bool)
	// Running returns the job store the runtime clients are kept in and
	// the poller that applies them on this node, or nil, nil while the
	// store is not running (the API then answers 503). Required.
	Running func() (Store, *clients.Poller)
	// Upstreams are the upstreams a client's limits may name. Defaults to
	// none.
	Upstreams []string
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// Logger logs every action with the admin's name. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Registerer takes sluice_client_admin_actions_total. Defaults to
	// none (the counter is kept but not exported).
	Registerer prometheus.Registerer
}

// API is the admin API's clients routes.
type API struct {
	reg       *clients.Registry
	auth      func(r *http.Request) (clients.Client, bool)
	running   func() (Store, *clients.Poller)
	upstreams map[string]bool
	clock     clock.Clock
	log       *slog.Logger
	metrics   *adminMetrics
}

// New returns the API of cfg.
func New(cfg Config) (*API, error) {
	if cfg.Registry == nil || cfg.Authenticate == nil || cfg.Running == nil {
		return nil, errors.New("configuring the clients API: Registry, Authenticate and Running are required")
	}
	a := &API{reg: cfg.Registry, auth: cfg.Authenticate, running: cfg.Running, upstreams: map[string]bool{},
		clock: clock.Or(cfg.Clock), log: cmp.Or(cfg.Logger, slog.Default()), metrics: newAdminMetrics(cfg.Registerer)}
	for _, n := range cfg.Upstreams {
		a.upstreams[n] = true
	}
	return a, nil
}

// ClientRequest is the body of POST /v1/clients (Name required) and of
// PATCH /v1/clients/{name} (every field optional: the ones given replace
// the client's).
type ClientRequest struct {
	Name            string              `json:"name,omitempty"`
	Role            *string             `json:"role,omitempty"`
	DefaultPriority *string             `json:"default_priority,omitempty"`
	MaxPriority     *string             `json:"max_priority,omitempty"`
	Limits          *admit.ClientLimits `json:"limits,omitempty"`
	Budget          *admit.Budget       `json:"budget,omitempty"`
	// AllowedUpstreams and AllowedModels replace the client's lists ([]
	// allows every one).
	AllowedUpstreams *[]string `json:"allowed_upstreams,omitempty"`
	AllowedModels    *[]string `json:"allowed_models,omitempty"`
	// ExpiresAt ends every key of the client; null clears it.
	ExpiresAt OptionalTime `json:"expires_at,omitzero"`
}

// OptionalTime is a time a PATCH may set, clear (null) or leave out.
type OptionalTime struct {
	Set  bool       // the field was present
	Time *time.Time // nil: null
}

// UnmarshalJSON reads a time or null.
func (o *OptionalTime) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		o.Time = nil
		return nil
	}
	var t time.Time
	if err := json.Unmarshal(b, &t); err != nil {
		return errors.New("expires_at: want an RFC 3339 time, e.g. 2027-01-01T00:00:00Z, or null")
	}
	o.Time = &t
	return nil
}

// MarshalJSON writes the time or null.
func (o OptionalTime) MarshalJSON() ([]byte, error) { return json.Marshal(o.Time) }

// IsZero reports whether the field is left out.
func (o OptionalTime) IsZero() bool { return !o.Set }

// RotateRequest is the body of POST /v1/clients/{name}/rotate (optional).
type RotateRequest struct {
	// GraceSeconds keeps the client's current keys valid that long after
	// the rotation. Defaults to 0: they stop at once.
	GraceSeconds float64 `json:"grace_seconds,omitempty"`
}

// RotateGraceMax bounds a rotation's grace period.
const RotateGraceMax = 30 * 24 * time.Hour

// ClientInfo describes a client: the body of every /v1/clients answer but
// the list's and the revocation's.
type ClientInfo struct {
	Name string `json:"name"`
	// Source is config (the config file's: read-only here) or api.
	Source          string             `json:"source"`
	Role            string             `json:"role"`
	DefaultPriority string             `json:"default_priority"`
	MaxPriority     string             `json:"max_priority"`
	Limits          admit.ClientLimits `json:"limits"`
	Budget          admit.Budget       `json:"budget"`
	admit.Access
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Keys lists an API client's keys by their first characters; a
	// config client's keys are never shown.
	Keys      []ClientKeyInfo `json:"keys,omitempty"`
	Version   int64           `json:"version,omitempty"`
	CreatedAt *time.Time      `json:"created_at,omitempty"`
	UpdatedAt *time.Time      `json:"updated_at,omitempty"`
	// Key is the new key, in the answers to a creation and a rotation
	// only: it is shown once and cannot be read again.
	Key string `json:"key,omitempty"`
}

// ClientKeyInfo is one key of an API client, without the key.
type ClientKeyInfo struct {
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ClientList is the body of GET /v1/clients.
type ClientList struct {
	Data []ClientInfo `json:"data"`
}

// ClientRevoked is the body of DELETE /v1/clients/{name}.
type ClientRevoked struct {
	Name    string `json:"name"`
	Revoked bool   `json:"revoked"`
}

// Client sources.
const (
	ClientSourceConfig = "config"
	ClientSourceAPI    = "api"
)

// ErrorTypeConfigManaged is the error type of a change to a client the
// config file defines (409).
const ErrorTypeConfigManaged = "config-managed"

// clientBodyMax bounds a /v1/clients request body.
const clientBodyMax = 64 << 10

// clientNameRE is what a runtime client's name may be: it appears in URLs,
// logs and metric labels.
var clientNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// clientNamesReserved are metric label values of their own.
var clientNamesReserved = []string{clientLabelOther, clientLabelUnknown, clients.Anonymous}

const (
	clientLabelOther   = "other"
	clientLabelUnknown = "unknown"
)

// adminMetrics counts the admin API's actions.
type adminMetrics struct{ total *prometheus.CounterVec }

func newAdminMetrics(reg prometheus.Registerer) *adminMetrics {
	m := &adminMetrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_client_admin_actions_total",
		Help: "Admin API actions on clients (/v1/clients) by action (create, update, rotate, revoke) and result (ok, refused: invalid or conflicting, failed: the store).",
	}, []string{"action", "result"})}
	for _, a := range []string{"create", "update", "rotate", "revoke"} {
		for _, r := range []string{"ok", "refused", "failed"} {
			m.total.WithLabelValues(a, r)
		}
	}
	if reg != nil {
		reg.MustRegister(m.total)
	}
	return m
}

// Register registers the API's routes on mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/clients", a.admin("", a.listClients))
	mux.HandleFunc("POST /v1/clients", a.admin("create", a.createClient))
	mux.HandleFunc("GET /v1/clients/{name}", a.admin("", a.getClient))
	mux.HandleFunc("PATCH /v1/clients/{name}", a.admin("update", a.updateClient))
	mux.HandleFunc("POST /v1/clients/{name}/rotate", a.admin("rotate", a.rotateClient))
	mux.HandleFunc("DELETE /v1/clients/{name}", a.admin("revoke", a.revokeClient))
}

// clientsCall is one admin API request being served.
type clientsCall struct {
	w     http.ResponseWriter
	r     *http.Request
	admin string
	reqID string
	store Store
}

// admin authenticates an admin, answers the route's outcome and, for a
// change (action not ""), logs and counts it.
func (a *API) admin(action string, fn func(c *clientsCall) (int, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		reqID := frontdoor.NewRequestID()
		w.Header().Set(frontdoor.HeaderRequestID, reqID)
		open := a.reg.Set().Open()
		cl, ok := a.auth(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing Sluice client key")
			return
		}
		if !cl.Admin {
			writeError(w, http.StatusForbidden, "permission_error",
				"/v1/clients needs an admin client key (role: admin); client "+cl.Name+" is not an admin")
			return
		}
		if open {
			writeError(w, http.StatusForbidden, "permission_error",
				"/v1/clients needs clients in the config (at least one with role: admin): a gateway without them is open to every caller")
			return
		}
		st, p := a.running()
		if st == nil || p == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable_error",
				"/v1/clients keeps clients in the job store, which is not running (store: none, or shutting down)")
			return
		}
		status, body, err := fn(&clientsCall{w: w, r: r, admin: cl.Name, reqID: reqID, store: st})
		result := "ok"
		if err != nil {
			pr := clientsProblem(err)
			result = "refused"
			if pr.Status >= 500 {
				result = "failed"
			}
			if action != "" {
				a.log.Warn("client admin action refused", "admin", cl.Name, "action", action, "client", r.PathValue("name"),
					"request_id", reqID, "status", pr.Status, "err", err)
				a.metrics.total.WithLabelValues(action, result).Inc()
			}
			jobsapi.WriteAPIError(w, pr, nil)
			return
		}
		if action != "" {
			name := r.PathValue("name")
			if ci, ok := body.(ClientInfo); ok {
				name = ci.Name
			}
			a.log.Info("client admin action", "admin", cl.Name, "action", action, "client", name, "request_id", reqID)
			a.metrics.total.WithLabelValues(action, result).Inc()
			// This node serves the change at once; the others within
			// clients_poll.
			if err := p.Load(r.Context()); err != nil {
				a.log.Warn("reading the runtime clients after a change", "err", err)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	}
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	jobsapi.WriteAPIError(w, frontdoor.Problem{Status: status, Type: typ, Message: msg}, nil)
}

// errClientRequest is a request the API refuses (400); the message names
// the field.
var errClientRequest = errors.New("invalid request")

// errConfigManaged is a change to a client of the config file (409).
var errConfigManaged = errors.New("config-managed client")

// clientsProblem maps an outcome to its HTTP answer.
func clientsProblem(err error) frontdoor.Problem {
	msg := err.Error()
	switch {
	case errors.Is(err, errClientRequest), errors.Is(err, jobstore.ErrInvalid):
		return frontdoor.Problem{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: msg}
	case errors.Is(err, errConfigManaged):
		return frontdoor.Problem{Status: http.StatusConflict, Type: ErrorTypeConfigManaged, Message: msg}
	case errors.Is(err, jobstore.ErrNotFound):
		return frontdoor.Problem{Status: http.StatusNotFound, Type: "not_found_error", Message: msg}
	case errors.Is(err, jobstore.ErrConflict):
		return frontdoor.Problem{Status: http.StatusConflict, Type: "conflict_error", Message: msg}
	case errors.Is(err, jobstore.ErrUnavailable), errors.Is(err, jobstore.ErrClosed):
		return frontdoor.Problem{Status: http.StatusServiceUnavailable, Type: "unavailable_error", Message: "the job store is unavailable; try again", RetryAfter: time.Second}
	}
	return frontdoor.Problem{Status: http.StatusInternalServerError, Type: "api_error", Message: msg}
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errClientRequest, fmt.Sprintf(format, args...))
}

// decodeClientBody reads a JSON body strictly into v (an empty body
// leaves v as it is when optional).
func decodeClientBody(c *clientsCall, v any, optional bool) error {
	raw, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, clientBodyMax))
	if err != nil {
		return refused("reading the body: %v (at most %d bytes)", err, clientBodyMax)
	}
	if optional && len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	return decodeStrict(raw, v)
}

// decodeStrict decodes one JSON value into v, refusing unknown fields;
// its errors name the field at fault.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return refused("%s: want a JSON %s, got %s", te.Field, te.Type, te.Value)
		}
		return refused("the body is not a valid request: %v", err)
	}
	if dec.More() {
		return refused("the body holds more than one JSON value")
	}
	return nil
}

// apply sets the fields req gives on sp.
func (req ClientRequest) apply(sp clients.Spec) clients.Spec {
	if req.Role != nil {
		sp.Role = *req.Role
	}
	if req.DefaultPriority != nil {
		sp.DefaultPriority = *req.DefaultPriority
	}
	if req.MaxPriority != nil {
		sp.MaxPriority = *req.MaxPriority
	}
	if req.Limits != nil {
		sp.Limits = *req.Limits
	}
	if req.Budget != nil {
		sp.Budget = *req.Budget
	}
	if req.AllowedUpstreams != nil {
		sp.Upstreams = *req.AllowedUpstreams
	}
	if req.AllowedModels != nil {
		sp.Models = *req.AllowedModels
	}
	if req.ExpiresAt.Set {
		sp.ExpiresAt = nil
		if req.ExpiresAt.Time != nil {
			t := req.ExpiresAt.Time.UTC()
			sp.ExpiresAt = &t
		}
	}
	return sp
}

func (a *API) createClient(c *clientsCall) (int, any, error) {
	var req ClientRequest
	if err := decodeClientBody(c, &req, false); err != nil {
		return 0, nil, err
	}
	if !clientNameRE.MatchString(req.Name) {
		return 0, nil, refused("name: %q must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name)
	}
	if slices.Contains(clientNamesReserved, req.Name) {
		return 0, nil, refused("name: %q is reserved (a metric label of its own)", req.Name)
	}
	if _, ok := a.reg.ConfigClient(req.Name); ok {
		return 0, nil, fmt.Errorf("%w: client %q is defined in the config file; change it there", errConfigManaged, req.Name)
	}
	now := a.clock.Now()
	sp := req.apply(clients.Spec{}).WithDefaults()
	if err := sp.Validate(req.Name, a.upstreams); err != nil {
		return 0, nil, refused("%v", err)
	}
	if sp.ExpiresAt != nil && !sp.ExpiresAt.After(now) {
		return 0, nil, refused("expires_at: %s is not in the future", sp.ExpiresAt.Format(time.RFC3339))
	}
	key, stored, err := clients.NewKey(now)
	if err != nil {
		return 0, nil, err
	}
	spec, err := json.Marshal(sp)
	if err != nil {
		return 0, nil, fmt.Errorf("encoding the client: %w", err)
	}
	sc, err := c.store.CreateClient(c.r.Context(), jobstore.CreateClientParams{Name: req.Name, Spec: spec,
		Keys: []jobstore.ClientKey{stored}, Now: now})
	if err != nil {
		return 0, nil, err
	}
	rc, err := clients.Decode(sc)
	if err != nil {
		return 0, nil, err
	}
	info := runtimeInfo(rc)
	info.Key = key
	return http.StatusCreated, info, nil
}

func (a *API) listClients(c *clientsCall) (int, any, error) {
	// The store's, not this node's copy: a client created elsewhere a
	// moment ago is listed.
	stored, err := c.store.ListClients(c.r.Context())
	if err != nil {
		return 0, nil, err
	}
	cfgs := a.reg.Config()
	out := ClientList{Data: make([]ClientInfo, 0, len(cfgs)+len(stored))}
	taken := map[string]bool{}
	for _, cc := range cfgs {
		out.Data = append(out.Data, configInfo(cc))
		taken[cc.Name] = true
	}
	for _, sc := range stored {
		if taken[sc.Name] {
			continue // shadowed by the config's
		}
		rc, err := clients.Decode(sc)
		if err != nil {
			return 0, nil, err
		}
		out.Data = append(out.Data, runtimeInfo(rc))
	}
	return http.StatusOK, out, nil
}

func (a *API) getClient(c *clientsCall) (int, any, error) {
	name := c.r.PathValue("name")
	if cc, ok := a.reg.ConfigClient(name); ok {
		return http.StatusOK, configInfo(cc), nil
	}
	sc, err := c.store.GetClient(c.r.Context(), name)
	if err != nil {
		return 0, nil, err
	}
	rc, err := clients.Decode(sc)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, runtimeInfo(rc), nil
}

// clientWriteTries bounds the read-modify-write retries of a change that
// raced another admin's.
const clientWriteTries = 3

// modify reads the API client name, lets change compute its new spec and
// keys, and writes them if nobody wrote it meanwhile (else reads again).
func (a *API) modify(c *clientsCall, change func(rc clients.Runtime) (clients.Spec, []jobstore.ClientKey, error)) (clients.Runtime, error) {
	name := c.r.PathValue("name")
	if _, ok := a.reg.ConfigClient(name); ok {
		return clients.Runtime{}, fmt.Errorf("%w: client %q is defined in the config file; change it there", errConfigManaged, name)
	}
	var err error
	for range clientWriteTries {
		var sc *jobstore.StoredClient
		sc, err = c.store.GetClient(c.r.Context(), name)
		if err != nil {
			return clients.Runtime{}, err
		}
		rc, derr := clients.Decode(sc)
		if derr != nil {
			return clients.Runtime{}, derr
		}
		sp, keys, cerr := change(rc)
		if cerr != nil {
			return clients.Runtime{}, cerr
		}
		spec, merr := json.Marshal(sp)
		if merr != nil {
			return clients.Runtime{}, fmt.Errorf("encoding the client: %w", merr)
		}
		sc, err = c.store.UpdateClient(c.r.Context(), jobstore.UpdateClientParams{Name: name, Spec: spec, Keys: keys,
			IfVersion: sc.Version, Now: a.clock.Now()})
		if err == nil {
			return clients.Decode(sc)
		}
		if !errors.Is(err, jobstore.ErrConflict) {
			return clients.Runtime{}, err
		}
	}
	return clients.Runtime{}, err
}

func (a *API) updateClient(c *clientsCall) (int, any, error) {
	var req ClientRequest
	if err := decodeClientBody(c, &req, false); err != nil {
		return 0, nil, err
	}
	if req.Name != "" && req.Name != c.r.PathValue("name") {
		return 0, nil, refused("name: a client cannot be renamed (create another and revoke this one)")
	}
	now := a.clock.Now()
	rc, err := a.modify(c, func(rc clients.Runtime) (clients.Spec, []jobstore.ClientKey, error) {
		sp := req.apply(rc.Spec).WithDefaults()
		if err := sp.Validate(rc.Name, a.upstreams); err != nil {
			return clients.Spec{}, nil, refused("%v", err)
		}
		if req.ExpiresAt.Time != nil && !sp.ExpiresAt.After(now) {
			return clients.Spec{}, nil, refused("expires_at: %s is not in the future", sp.ExpiresAt.Format(time.RFC3339))
		}
		return sp, rc.Keys, nil
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, runtimeInfo(rc), nil
}

func (a *API) rotateClient(c *clientsCall) (int, any, error) {
	var req RotateRequest
	if err := decodeClientBody(c, &req, true); err != nil {
		return 0, nil, err
	}
	grace := time.Duration(req.GraceSeconds * float64(time.Second))
	if req.GraceSeconds < 0 || grace > RotateGraceMax {
		return 0, nil, refused("grace_seconds: %v is not between 0 and %d (30 days)", req.GraceSeconds, int(RotateGraceMax.Seconds()))
	}
	var key string
	rc, err := a.modify(c, func(rc clients.Runtime) (clients.Spec, []jobstore.ClientKey, error) {
		now := a.clock.Now()
		k, stored, err := clients.NewKey(now)
		if err != nil {
			return clients.Spec{}, nil, err
		}
		key = k
		keys := []jobstore.ClientKey{stored}
		if grace > 0 {
			until := now.Add(grace)
			for _, old := range rc.Keys {
				if !old.ExpiresAt.IsZero() && !old.ExpiresAt.After(now) {
					continue // already expired
				}
				if old.ExpiresAt.IsZero() || until.Before(old.ExpiresAt) {
					old.ExpiresAt = until
				}
				keys = append(keys, old)
			}
		}
		return rc.Spec, keys, nil
	})
	if err != nil {
		return 0, nil, err
	}
	info := runtimeInfo(rc)
	info.Key = key
	return http.StatusOK, info, nil
}

func (a *API) revokeClient(c *clientsCall) (int, any, error) {
	name := c.r.PathValue("name")
	if _, ok := a.reg.ConfigClient(name); ok {
		return 0, nil, fmt.Errorf("%w: client %q is defined in the config file; remove it there", errConfigManaged, name)
	}
	if err := c.store.DeleteClient(c.r.Context(), jobstore.DeleteClientParams{Name: name, Now: a.clock.Now()}); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, ClientRevoked{Name: name, Revoked: true}, nil
}

func configInfo(cc clients.Config) ClientInfo {
	return ClientInfo{Name: cc.Name, Source: ClientSourceConfig, Role: cc.Role, DefaultPriority: cc.DefaultPriority,
		MaxPriority: cc.MaxPriority, Limits: cc.Limits, Budget: cc.Budget, Access: cc.Access}
}

func runtimeInfo(rc clients.Runtime) ClientInfo {
	created, updated := rc.Created, rc.Updated
	info := ClientInfo{Name: rc.Name, Source: ClientSourceAPI, Role: rc.Spec.Role, DefaultPriority: rc.Spec.DefaultPriority,
		MaxPriority: rc.Spec.MaxPriority, Limits: rc.Spec.Limits, Budget: rc.Spec.Budget, Access: rc.Spec.Access, ExpiresAt: rc.Spec.ExpiresAt,
		Version: rc.Version, CreatedAt: &created, UpdatedAt: &updated, Keys: make([]ClientKeyInfo, 0, len(rc.Keys))}
	for _, k := range rc.Keys {
		ki := ClientKeyInfo{Prefix: k.Prefix, CreatedAt: k.CreatedAt}
		if !k.ExpiresAt.IsZero() {
			e := k.ExpiresAt
			ki.ExpiresAt = &e
		}
		info.Keys = append(info.Keys, ki)
	}
	return info
}

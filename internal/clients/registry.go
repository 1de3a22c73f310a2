package clients

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
)

// Registry is the clients in force on one gateway: the config's (a reload
// replaces them) and the runtime clients (the Poller replaces them),
// merged by the package's rule into the Set every route authenticates
// with. Its methods are safe for concurrent use.
type Registry struct {
	now   func() time.Time
	apply func(admitted []admit.Client, names []string)

	set     atomic.Pointer[Set] // read by every request without mu
	mu      sync.Mutex          // serializes changes; guards config and runtime
	config  []Config
	runtime []Runtime
}

// NewRegistry holds the config's clients cfgs (defaulted and validated).
// now reads the clock for keys that expire. Every later change hands the
// admission layer's view of the clients in force and their names, in
// order, to apply (under the registry's lock, so changes arrive in
// order); the first, cfgs, is the caller's to apply (Admitted).
func NewRegistry(cfgs []Config, now func() time.Time, apply func(admitted []admit.Client, names []string)) *Registry {
	r := &Registry{now: now, apply: apply, config: append([]Config{}, cfgs...)}
	r.set.Store(NewSet(r.config, nil, now))
	return r
}

// Set returns the clients in force.
func (r *Registry) Set() *Set { return r.set.Load() }

// SetConfig puts the config's clients cfgs in force (a reload), keeping
// the runtime clients.
func (r *Registry) SetConfig(cfgs []Config) { r.change(append([]Config{}, cfgs...), nil) }

// SetRuntime puts the runtime clients rt in force (a poll), keeping the
// config's.
func (r *Registry) SetRuntime(rt []Runtime) {
	if rt == nil {
		rt = []Runtime{}
	}
	r.change(nil, rt)
}

// Config returns the config's clients in force.
func (r *Registry) Config() []Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.config
}

// ConfigClient returns the config's client named name, if any.
func (r *Registry) ConfigClient(name string) (Config, bool) {
	for _, c := range r.Config() {
		if c.Name == name {
			return c, true
		}
	}
	return Config{}, false
}

// change puts the config's clients cfgs (nil: keep the ones in force)
// and the runtime clients (nil: keep them) in force everywhere: the key
// lookup, then apply (the admission layer's limits and budgets, and the
// metrics' client label).
func (r *Registry) change(cfgs []Config, runtime []Runtime) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cfgs != nil {
		r.config = cfgs
	}
	if runtime != nil {
		r.runtime = runtime
	}
	r.set.Store(NewSet(r.config, r.runtime, r.now))
	all := Admitted(r.config)
	names := make([]string, 0, len(r.config)+len(r.runtime))
	taken := map[string]bool{}
	for _, c := range r.config {
		names = append(names, c.Name)
		taken[c.Name] = true
	}
	if len(r.config) > 0 {
		for _, rc := range r.runtime {
			if !taken[rc.Name] {
				all = append(all, admit.Client{Name: rc.Name, Limits: rc.Spec.Limits, Budget: rc.Spec.Budget, Access: rc.Spec.Access})
				names = append(names, rc.Name)
			}
		}
	}
	r.apply(all, names)
}

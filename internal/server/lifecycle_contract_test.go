package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/storelink"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// admissionLayer is the admission layer as a lifecycle.Service: it
// starts with the store its spend is flushed to.
type admissionLayer struct {
	l  *admit.Layer
	st jobstore.Store
}

func (a admissionLayer) Start(ctx context.Context) error { return a.l.Start(ctx, a.st) }
func (a admissionLayer) Stop(ctx context.Context) error  { return a.l.Stop(ctx) }

// TestLifecycleContract: every background service answers the same way
// (lifecycle.Base) to a second Start, a Start after Stop, a Stop before
// Start, a second Stop and a Start whose context is already canceled.
func TestLifecycleContract(t *testing.T) {
	t.Parallel()
	upstreamURL := "http://127.0.0.1:1" // nothing is sent
	upstreamCfg := upcfg.Config{Name: "a", Protocol: llm.Anthropic, BaseURL: upstreamURL, APIKey: "k"}
	openStore := func(t *testing.T) jobstore.Store {
		st, err := jobstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "sluice.db"), jobstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		return st
	}
	newServer := func(t *testing.T) *Server {
		srv, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Upstreams: []upcfg.Config{upstreamCfg}},
			WithLogger(discardLogger()))
		require.NoError(t, err)
		return srv
	}
	newDispatcher := func(t *testing.T) *dispatch.Dispatcher {
		d, err := dispatch.New(dispatch.Config{Config: upstreamCfg})
		require.NoError(t, err)
		return d
	}
	clusterCfg := cluster.Config{NodeID: "n", SyncInterval: time.Hour, LeaseTTL: 3 * time.Hour}
	services := []struct {
		name string
		new  func(t *testing.T) lifecycle.Service
	}{
		{"server", func(t *testing.T) lifecycle.Service { return newServer(t) }},
		{"history sampler", func(t *testing.T) lifecycle.Service {
			v := opsview.New(opsview.Config{Upstreams: []upcfg.Config{upstreamCfg}, Clock: clock.Real(),
				HistoryInterval: time.Hour, HistorySamples: 3})
			return v.Sampler()
		}},
		{"admission layer (spend flusher)", func(t *testing.T) lifecycle.Service {
			return admissionLayer{l: newServer(t).admit, st: openStore(t)}
		}},
		{"runtime clients poller", func(t *testing.T) lifecycle.Service {
			return clients.NewPoller(clients.PollerConfig{Store: openStore(t), Interval: time.Hour, Apply: func([]clients.Runtime) {}})
		}},
		{"dispatcher", func(t *testing.T) lifecycle.Service { return newDispatcher(t) }},
		{"transport", func(t *testing.T) lifecycle.Service {
			tr, err := sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic, BaseURL: upstreamURL, APIKey: "k"})
			require.NoError(t, err)
			return tr
		}},
		{"mock provider", func(t *testing.T) lifecycle.Service {
			m, err := mock.New(mock.Config{Listen: "127.0.0.1:0"})
			require.NoError(t, err)
			return m
		}},
		{"job service", func(t *testing.T) lifecycle.Service {
			d := newDispatcher(t)
			require.NoError(t, d.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
			svc, err := jobs.New(jobs.Config{Store: openStore(t), Dispatchers: map[string]jobs.Dispatcher{"a": d},
				Protocols: map[string]llm.Protocol{"a": llm.Anthropic}, Logger: discardLogger()})
			require.NoError(t, err)
			return svc
		}},
		{"job rescuer", func(t *testing.T) lifecycle.Service {
			r, err := jobstore.NewJobRescuer(openStore(t), jobstore.JobRescuerConfig{})
			require.NoError(t, err)
			return r
		}},
		{"job cleaner", func(t *testing.T) lifecycle.Service {
			c, err := jobstore.NewJobCleaner(openStore(t), jobstore.JobCleanerConfig{})
			require.NoError(t, err)
			return c
		}},
		{"cluster node", func(t *testing.T) lifecycle.Service {
			n, err := cluster.NewNode(clusterCfg, cluster.NewMemory(nil), nil, nil, discardLogger(), nil)
			require.NoError(t, err)
			return n
		}},
		{"store link", func(t *testing.T) lifecycle.Service {
			l, err := storelink.New(storelink.Config{Name: "jobs", Open: func(context.Context) error { return nil },
				Ping: func(context.Context) error { return nil }, Logger: discardLogger()})
			require.NoError(t, err)
			return l
		}},
		{"cluster tenants", func(t *testing.T) lifecycle.Service {
			ts, err := cluster.NewTenants(clusterCfg, nil, cluster.NewMemory(nil), nil, discardLogger())
			require.NoError(t, err)
			return ts
		}},
	}
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	cases := []struct {
		name string
		run  func(t *testing.T, s lifecycle.Service)
	}{
		{"second Start", func(t *testing.T, s lifecycle.Service) {
			require.NoError(t, s.Start(ctx))
			require.ErrorIs(t, s.Start(ctx), lifecycle.ErrStarted)
			require.NoError(t, s.Stop(ctx))
		}},
		{"Start after Stop", func(t *testing.T, s lifecycle.Service) {
			require.NoError(t, s.Start(ctx))
			require.NoError(t, s.Stop(ctx))
			require.ErrorIs(t, s.Start(ctx), lifecycle.ErrStopped)
		}},
		{"Stop before Start", func(t *testing.T, s lifecycle.Service) {
			require.NoError(t, s.Stop(ctx))
			require.ErrorIs(t, s.Start(ctx), lifecycle.ErrStopped, "a service stopped before Start never starts")
		}},
		{"Stop twice", func(t *testing.T, s lifecycle.Service) {
			require.NoError(t, s.Start(ctx))
			require.NoError(t, s.Stop(ctx))
			require.NoError(t, s.Stop(ctx))
		}},
		{"canceled start context", func(t *testing.T, s lifecycle.Service) {
			require.ErrorIs(t, s.Start(canceled), context.Canceled)
			require.NoError(t, s.Start(ctx), "refused, not stopped: a later Start starts it")
			require.NoError(t, s.Stop(ctx))
		}},
	}
	for _, svc := range services {
		t.Run(svc.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, svc.new(t))
				})
			}
		})
	}
}

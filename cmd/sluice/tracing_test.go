package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTracingFromEnv(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		errLike string
		note    string
	}{
		{name: "off without an endpoint", env: map[string]string{}, note: "off (set OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SDK_DISABLED": "true"}, note: "off"},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_TRACES_EXPORTER": "none"}, note: "off"},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, errLike: "http/protobuf only"},
		{name: "zipkin refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, errLike: "otlp only"},
		{name: "on with an endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}, on: true, note: "OTLP over HTTP to " + collector.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			tp, note, stop, err := tracingFromEnv(context.Background(), lookup)
			if tc.errLike != "" {
				require.ErrorContains(t, err, tc.errLike)
				return
			}
			require.NoError(t, err)
			require.Contains(t, note, tc.note)
			if !tc.on {
				require.Nil(t, tp)
				return
			}
			require.NotNil(t, tp)
			_, span := tp.Tracer("test").Start(context.Background(), "x")
			span.End()
			require.NoError(t, stop(context.Background()))
			require.Positive(t, posts.Load(), "the span reached the collector at shutdown")
		})
	}
}

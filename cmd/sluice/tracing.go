package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/server"
)

// tracingFromEnv builds the gateway's tracer provider from the standard
// OpenTelemetry environment variables. Tracing is off (nil provider)
// unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set or OTEL_TRACES_EXPORTER=otlp; OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off. The exporter is OTLP over HTTP
// (protobuf) and reads the rest itself (headers, timeout, TLS,
// compression); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the
// resource (service.name defaults to "sluice"), OTEL_TRACES_SAMPLER picks
// the sampler. It returns what it did, for the banner, and the shutdown
// that flushes the spans.
func tracingFromEnv(ctx context.Context, lookup server.LookupEnv) (trace.TracerProvider, string, func(context.Context) error, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	nop := func(context.Context) error { return nil }
	exporter := strings.ToLower(get("OTEL_TRACES_EXPORTER"))
	// The signal's own endpoint is used as written; the general one gets
	// /v1/traces appended (the OTLP spec's rule).
	endpoint := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if e := get("OTEL_EXPORTER_OTLP_ENDPOINT"); endpoint == "" && e != "" {
		endpoint = strings.TrimRight(e, "/") + "/v1/traces"
	}
	switch {
	case strings.EqualFold(get("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return nil, "off (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)", nop, nil
	case exporter != "" && exporter != "otlp":
		return nil, "", nop, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: sluice exports traces with otlp only (or none)", exporter)
	case endpoint == "" && exporter == "":
		return nil, "off (set OTEL_EXPORTER_OTLP_ENDPOINT to export traces)", nop, nil
	}
	proto := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, "", nop, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: sluice exports OTLP over http/protobuf only", proto)
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, "", nop, fmt.Errorf("setting up the OTLP trace exporter: %w", err)
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "sluice"),
		attribute.String("service.version", currentBuild().Version)), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, "", nop, fmt.Errorf("reading OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, "OTLP over HTTP to " + describeEndpoint(endpoint), tp.Shutdown, nil
}

// describeEndpoint is the exporter's endpoint for the banner, without
// credentials.
func describeEndpoint(e string) string {
	if e == "" {
		return "http://localhost:4318/v1/traces (the default)"
	}
	return describeStore(e, false)
}

//go:build unix

package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// BenchmarkProxiedRequest sends one OpenAI chat completion (about 2 KB in,
// a fixed answer with usage out) through a bare httputil.ReverseProxy and
// through the gateway (no limits configured: admitted at once), to the
// same in-process upstream. Allocations per op include the client's and
// the upstream's, the same on both sides: the difference is the proxy's;
// so does cpu-ns/op, the process's CPU time (getrusage) per request.
func BenchmarkProxiedRequest(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":500,"completion_tokens":3,"total_tokens":503}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer up.Close()
	body := []byte(`{"model":"gpt-4.1","max_tokens":64,"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum dolor ", 110) + `"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	send := func(b *testing.B, url string) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-client")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("bare", func(b *testing.B) {
		u, _ := url.Parse(up.URL)
		rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, FlushInterval: -1,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		px := httptest.NewServer(rp)
		defer px.Close()
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			send(b, px.URL+"/v1/chat/completions")
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("sluice", func(b *testing.B) {
		g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
			Upstreams: []upcfg.Config{{Name: "openai", Protocol: llm.OpenAI, BaseURL: up.URL, APIKey: "sk-up"}}},
			WithLogger(discardLogger()))
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = g.Stop(context.Background()) }()
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			send(b, "http://"+g.Addr()+"/openai/v1/chat/completions")
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// processCPU is the process's user plus system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

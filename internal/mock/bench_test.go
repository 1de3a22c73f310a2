package mock

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkMockMessages measures non-streaming Anthropic requests over real
// loopback HTTP, unlimited quotas, zero latency, from parallel clients with
// distinct API keys.
func BenchmarkMockMessages(b *testing.B) {
	s, err := New(Config{Listen: "127.0.0.1:0", OutputTokens: OutputRange{Min: 16, Max: 16}})
	require.NoError(b, err)
	require.NoError(b, s.Start(context.Background()))
	defer func() { require.NoError(b, s.Stop(context.Background())) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := s.URL() + "/v1/messages"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(anthropicBody))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("x-api-key", "bench")
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
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

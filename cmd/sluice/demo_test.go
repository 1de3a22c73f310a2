package main

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoKeep: with --keep the demo prints its report, then the URLs,
// and the gateway and the mock keep answering until Ctrl-C.
func TestDemoKeep(t *testing.T) {
	t.Parallel()
	ctx, interrupt := context.WithCancel(boundedContext(t))
	defer interrupt()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runMain(ctx, []string{"demo", "--quick", "--requests", "20", "--keep"}, &stdout, &stderr)
	}()
	urls := regexp.MustCompile(`gateway    (\S+) [\s\S]*mock       (\S+)`)
	require.Eventually(t, func() bool { return urls.MatchString(stdout.String()) }, 25*time.Second, 20*time.Millisecond, stderr.String())
	m := urls.FindStringSubmatch(stdout.String())
	require.Contains(t, stdout.String(), "Side by side", "the report comes first")
	require.Contains(t, stdout.String(), "dashboard  "+m[1]+"/ui")
	require.Contains(t, stderr.String(), "demo: gateway at "+m[1])
	for _, u := range []string{m[1] + "/v1/status", m[2] + "/mock/stats"} {
		resp, err := http.Get(u) //nolint:noctx // test
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, u)
	}
	interrupt()
	require.Equal(t, 0, <-code, stderr.String())
	resp, err := http.Get(m[1] + "/v1/status") //nolint:noctx // test
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "the gateway stopped with Ctrl-C")
}

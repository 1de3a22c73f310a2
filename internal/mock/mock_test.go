package mock

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// newMock returns a mock on a fake clock at t0.
func newMock(t *testing.T, cfg Config) (*Server, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	s, err := New(cfg)
	require.NoError(t, err)
	return s, fc
}

const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"Hello there"}]}`
const openAIBody = `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Hello there"}]}`

// call sends one request through the handler (no network).
func call(s *Server, method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

func anth(s *Server, key, body string) *httptest.ResponseRecorder {
	return call(s, http.MethodPost, "/v1/messages", map[string]string{"x-api-key": key}, body)
}

func oai(s *Server, key, body string) *httptest.ResponseRecorder {
	return call(s, http.MethodPost, "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + key}, body)
}

// peekAnthropic returns key's messages rate-limit headers without charging
// anything: a body that fails validation is answered with them.
func peekAnthropic(s *Server, key string) http.Header {
	return anth(s, key, `{"model":`).Header()
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), string(b))
	return m
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	name string
	data string
}

// parseSSE is the tests' own SSE parser: "field: value" lines, events
// dispatched on a blank line, comments skipped.
func parseSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

package batches

import (
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
)

// TestBatchSizeIsWhatCreateSends: BatchBytes and LineBytes add up, with
// the lines' bodies, to the bytes Create sends, to the byte: the
// Anthropic create's body, the OpenAI upload's file.
func TestBatchSizeIsWhatCreateSends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p        llm.Protocol
		endpoint string
	}{{llm.Anthropic, ""}, {llm.OpenAI, ""}, {llm.OpenAI, "/v1/embeddings"}} {
		t.Run(string(tc.p)+tc.endpoint, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var sent int64 = -1
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				switch r.URL.Path {
				case "/v1/messages/batches":
					b, _ := io.ReadAll(r.Body)
					sent = int64(len(b))
				case "/v1/files":
					_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
					mr := multipart.NewReader(r.Body, params["boundary"])
					for {
						part, err := mr.NextPart()
						if err != nil {
							break
						}
						b, _ := io.ReadAll(part)
						if part.FormName() == "file" {
							sent = int64(len(b))
						}
					}
				}
				w.WriteHeader(http.StatusInternalServerError) // the test needs only what was sent
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, tc.p, srv.URL, "k")
			var ls []Line
			want := BatchBytes(tc.p)
			for i := range 7 {
				id := fmt.Sprintf("job_%d", i*137)
				body := fmt.Sprintf(`{"model":"m","input":"%s"}`, strings.Repeat("x", i*11))
				ls = append(ls, Line{CustomID: id, Body: []byte(body)})
				want += int64(len(body)) + LineBytes(tc.p, tc.endpoint, id)
			}
			_, err := c.Create(t.Context(), CreateParams{Endpoint: tc.endpoint, Lines: ls})
			require.Error(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, want, sent)
		})
	}
}

package sluice_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice"
)

// ExampleVerifyWebhook is a webhook receiver for finished jobs: it checks
// the signature and processes each delivery once, whatever the number of
// retries (a receiver too slow to answer in time gets the same delivery
// again, with the same webhook-id).
func ExampleVerifyWebhook() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // jobs.webhook_secret
	var mu sync.Mutex
	seen := map[string]bool{}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, err := sluice.VerifyWebhook(secret, body, r.Header)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		dup := seen[id]
		seen[id] = true
		mu.Unlock()
		if dup {
			fmt.Println("duplicate of", id, "skipped")
			return // 2xx: the gateway stops retrying
		}
		fmt.Println("processing", id, string(body))
	})

	// What the gateway sends: the same delivery twice.
	wh, _ := standardwebhooks.NewWebhook(secret)
	body := `{"id":17,"object":"job","state":"succeeded"}`
	for range 2 {
		now := time.Now()
		sig, _ := wh.Sign("msg_2b9f", now, []byte(body))
		req := httptest.NewRequest("POST", "/hooks/sluice", strings.NewReader(body))
		req.Header.Set("webhook-id", "msg_2b9f")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		receiver.ServeHTTP(httptest.NewRecorder(), req)
	}
	// Output:
	// processing msg_2b9f {"id":17,"object":"job","state":"succeeded"}
	// duplicate of msg_2b9f skipped
}

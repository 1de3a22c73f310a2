package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// responsesGateway starts a gateway on store (StoreNone for none) whose
// upstream "openai" is a pool of two keys of mock m: two projects, so a
// stored Response is found only with the key that created it.
func responsesGateway(t *testing.T, m *mock.Server, store string) *Server {
	t.Helper()
	g, err := New(Config{Store: store, Listen: "127.0.0.1:0", Upstreams: []upcfg.Config{{Name: "openai", Protocol: llm.OpenAI, BaseURL: m.URL(),
		APIKeys: []upcfg.Key{{Key: "sk-project-a"}, {Key: "sk-project-b"}},
		Limits:  upcfg.Limits{RequestsPerMinute: 6000, TokensPerMinute: 1_000_000, MaxConcurrency: 1}}}}, // a busy key sends the next create to the other
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	if store != StoreNone {
		// A PostgreSQL store connects in the background: the records go to
		// it once it has (the jobs API answers 503 until then).
		require.Eventually(t, func() bool {
			code, _ := call(t, "GET", "http://"+g.Addr()+"/v1/jobs", "", "")
			return code != http.StatusServiceUnavailable
		}, 30*time.Second, 20*time.Millisecond)
	}
	return g
}

// createResponses creates n stored Responses through g at once and
// returns their ids by the key (fingerprint) that created each.
func createResponses(t *testing.T, g *Server, n int) map[string][]string {
	t.Helper()
	byKey := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), "POST", "http://"+g.Addr()+"/openai/v1/responses",
				strings.NewReader(fmt.Sprintf(`{"model":"gpt-4.1","max_output_tokens":16,"input":"question %d"}`, i)))
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var r struct {
				ID string `json:"id"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK || r.ID == "" {
				t.Errorf("create %d: status %d, id %q, %v", i, resp.StatusCode, r.ID, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			k := resp.Header.Get(frontdoor.HeaderKey)
			byKey[k] = append(byKey[k], r.ID)
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.Len(t, byKey, 2, "both keys of the pool created responses")
	return byKey
}

// reachable counts the responses of ids that g reaches: GET, input_items
// and a continuation (previous_response_id) answered 200.
func reachable(t *testing.T, g *Server, ids []string) int {
	t.Helper()
	base := "http://" + g.Addr() + "/openai/v1/responses/"
	n := 0
	for _, id := range ids {
		get, _ := call(t, "GET", base+id, "", "")
		items, _ := call(t, "GET", base+id+"/input_items", "", "")
		next, _ := call(t, "POST", "http://"+g.Addr()+"/openai/v1/responses", "", `{"model":"gpt-4.1","max_output_tokens":16,"previous_response_id":"`+id+`","input":"and then?"}`)
		if get == http.StatusOK && items == http.StatusOK && next == http.StatusOK {
			n++
		}
	}
	return n
}

// TestResponseKeysOutliveARestart: responses created on both keys of a
// pool are reached through a new gateway on the same SQLite file (GET,
// input_items, previous_response_id), with the key that created each; a
// gateway without a store reaches only the ones its pass-through key
// created (the provider answers 404 for the others), so the store is what
// carries the keys across the restart.
func TestResponseKeysOutliveARestart(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	store := testStore(t)
	first := responsesGateway(t, m, store)
	byKey := createResponses(t, first, 8)
	require.NoError(t, first.Stop(t.Context()))

	var all []string
	for _, ids := range byKey {
		all = append(all, ids...)
	}
	again := responsesGateway(t, m, store)
	require.Equal(t, len(all), reachable(t, again, all), "every response reached after the restart")

	none := responsesGateway(t, m, StoreNone)
	got := reachable(t, none, all)
	require.Less(t, got, len(all), "without the store, the responses of the other key are not found")
	require.Positive(t, got, "the pass-through key's own are")

	// DELETE reaches its key too; the provider then forgets the response.
	code, body := call(t, "DELETE", "http://"+again.Addr()+"/openai/v1/responses/"+all[0], "", "")
	require.Equal(t, http.StatusOK, code, string(body))
	code, _ = call(t, "GET", "http://"+again.Addr()+"/openai/v1/responses/"+all[0], "", "")
	require.Equal(t, http.StatusNotFound, code)
}

// TestResponseKeysReachEveryNode: two gateways on one PostgreSQL store;
// every response created on one is reached through the other, by live
// requests and by jobs.
func TestResponseKeysReachEveryNode(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	m := startSpendMock(t)
	a := responsesGateway(t, m, dsn)
	b := responsesGateway(t, m, dsn)
	for _, ids := range createResponses(t, a, 8) {
		require.Equal(t, len(ids), reachable(t, b, ids), "node b reaches the responses created on node a")
		// A job continuing one goes to its key too (its ticket's call
		// moves there).
		for _, id := range ids[:min(2, len(ids))] { // however the creates landed on the keys
			code, body := call(t, "POST", "http://"+b.Addr()+"/v1/jobs", "",
				`{"upstream":"openai","path":"/v1/responses","request":{"model":"gpt-4.1","max_output_tokens":16,"previous_response_id":"`+id+`","input":"and then?"}}`)
			require.Equal(t, http.StatusAccepted, code, string(body))
			var job struct {
				ID    json.Number `json:"id"`
				State string      `json:"state"`
			}
			require.NoError(t, json.Unmarshal(body, &job))
			code, body = call(t, "GET", "http://"+b.Addr()+"/v1/jobs/"+job.ID.String()+"?wait=20s", "", "")
			require.Equal(t, http.StatusOK, code, string(body))
			require.NoError(t, json.Unmarshal(body, &job))
			require.Equal(t, "succeeded", job.State, string(body))
		}
	}
}

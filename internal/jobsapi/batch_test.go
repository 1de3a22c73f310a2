package jobsapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/llm"
)

func anthropicLine(id string) string {
	return `{"custom_id":"` + id + `","params":` + anthropicBody + `}`
}

func openAILine(id string) string {
	return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":` + openAIBody + `}`
}

func TestParseBatchFile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		file    string
		format  llm.Protocol
		valid   int
		invalid []int
		err     string
	}{
		{"anthropic", anthropicLine("a") + "\n\n" + anthropicLine("b") + "\n", llm.Anthropic, 2, nil, ""},
		{"openai crlf", openAILine("a") + "\r\n" + openAILine("b"), llm.OpenAI, 2, nil, ""},
		{"duplicate", anthropicLine("a") + "\n" + anthropicLine("a"), llm.Anthropic, 1, []int{2}, ""},
		{"mixed shapes", anthropicLine("a") + "\n" + openAILine("b"), llm.Anthropic, 1, []int{2}, ""},
		{"malformed", anthropicLine("a") + "\n{nope\n" + `{"params":{}}` + "\n" + `{"custom_id":"x","params":[]}`, llm.Anthropic, 1, []int{2, 3, 4}, ""},
		{"bad openai", `{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{}}` + "\n" + `{"custom_id":"b","method":"POST","url":"/v1/files","body":{}}`, "", 0, []int{1, 2}, ""},
		{"openai endpoints", `{"custom_id":"r","method":"POST","url":"/v1/responses","body":{"model":"m","input":"x"}}` + "\n" +
			`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"x"}}`, llm.OpenAI, 2, nil, ""},
		{"stream", `{"custom_id":"a","params":{"stream":true}}`, "", 0, []int{1}, ""},
		{"unknown field", `{"custom_id":"a","params":{},"extra":1}`, "", 0, []int{1}, ""},
		{"empty", "\n\n", "", 0, nil, "no requests"},
		{"too many", anthropicLine("a") + "\n" + anthropicLine("b") + "\n" + anthropicLine("c"), "", 0, nil, "more than 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := jobsapi.ParseBatchFile([]byte(tc.file), 2)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.format, f.Format)
			require.Len(t, f.Lines, tc.valid)
			var lines []int
			for _, e := range f.Invalid {
				lines = append(lines, e.Line)
				require.NotEmpty(t, e.Message)
			}
			require.Equal(t, tc.invalid, lines)
			for _, l := range f.Lines {
				require.NotEmpty(t, l.Path, "every line names its endpoint")
			}
		})
	}
}

func TestParseBatchFilePaths(t *testing.T) {
	t.Parallel()
	f, err := jobsapi.ParseBatchFile([]byte(anthropicLine("a")), 2)
	require.NoError(t, err)
	require.Equal(t, "/v1/messages", f.Lines[0].Path)
	f, err = jobsapi.ParseBatchFile([]byte(`{"custom_id":"r","method":"POST","url":"/v1/responses","body":{"model":"m","input":"x"}}`+"\n"+openAILine("c")), 2)
	require.NoError(t, err)
	require.Equal(t, "/v1/responses", f.Lines[0].Path)
	require.Equal(t, "/v1/chat/completions", f.Lines[1].Path)
	f, err = jobsapi.ParseBatchFile([]byte(`{"custom_id":"x","method":"POST","url":"/v1/files","body":{}}`), 2)
	require.NoError(t, err)
	require.Contains(t, f.Invalid[0].Message, "/v1/responses")
}

func FuzzParseBatchFile(f *testing.F) {
	f.Add([]byte(anthropicLine("my-first-request") + "\n" + anthropicLine("my-second-request")))
	f.Add([]byte(openAILine("request-1")))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[]}}` + "\n{"))
	f.Add([]byte("\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		bf, err := jobsapi.ParseBatchFile(data, 50)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, l := range bf.Lines {
			require.False(t, seen[l.CustomID], "duplicate custom_id %q accepted", l.CustomID)
			seen[l.CustomID] = true
			require.True(t, json.Valid(l.Body))
			require.NotEmpty(t, l.CustomID)
		}
		require.True(t, len(bf.Lines)+len(bf.Invalid) > 0)
	})
}

func TestBatchesBothShapes(t *testing.T) {
	t.Parallel()
	bad := `{"type":"error","error":{"type":"invalid_request_error","message":"bad model"},"request_id":"req_x"}`
	d := succeed()
	s := newService(t, nil, d, nil, nil)
	h := s.Handler()
	cases := []struct {
		name, upstream, file string
		check                func(t *testing.T, lines map[string]map[string]any)
	}{
		{"anthropic", "claude", anthropicLine("one") + "\n" + anthropicLine("two") + "\n", func(t *testing.T, lines map[string]map[string]any) {
			require.Len(t, lines, 2)
			r := lines["one"]["result"].(map[string]any)
			require.Equal(t, "succeeded", r["type"])
			require.Equal(t, "msg_1", r["message"].(map[string]any)["id"])
		}},
		{"openai", "gpt", openAILine("one") + "\n", func(t *testing.T, lines map[string]map[string]any) {
			require.Len(t, lines, 1)
			resp := lines["one"]["response"].(map[string]any)
			require.EqualValues(t, 200, resp["status_code"])
			require.Nil(t, lines["one"]["error"])
			require.True(t, strings.HasPrefix(lines["one"]["id"].(string), "batch_req_"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, h, "POST", "/v1/batches?upstream="+tc.upstream, tc.file)
			require.Equal(t, http.StatusOK, code, string(body))
			b := decode[jobsapi.BatchView](t, body)
			require.Equal(t, tc.upstream, map[string]string{"anthropic": "claude", "openai": "gpt"}[b.Format])
			var v jobsapi.BatchView
			for range 200 {
				_, body = do(t, h, "GET", "/v1/batches/"+b.ID, "")
				v = decode[jobsapi.BatchView](t, body)
				if v.ProcessingStatus == "ended" {
					break
				}
				page := decode[jobsapi.ListResponse](t, must(do(t, h, "GET", "/v1/jobs?batch_id="+b.ID, "")))
				for _, j := range page.Data {
					await(t, s, j.ID)
				}
			}
			require.Equal(t, "ended", v.ProcessingStatus)
			require.Equal(t, b.Total, v.RequestCounts.Succeeded)
			code, body = do(t, h, "GET", "/v1/batches/"+b.ID+"/results", "")
			require.Equal(t, 200, code)
			lines := map[string]map[string]any{}
			sc := bufio.NewScanner(bytes.NewReader(body))
			for sc.Scan() {
				var m map[string]any
				require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
				lines[m["custom_id"].(string)] = m
			}
			tc.check(t, lines)
		})
	}
	t.Run("errored result keeps the provider error", func(t *testing.T) {
		t.Parallel()
		v := jobsapi.JobView{CustomID: "x", State: "dead", Error: &jobsapi.ErrorView{Status: 400, Type: "invalid_request_error", Message: "bad model", Body: json.RawMessage(bad)}}
		line, ok := jobsapi.ResultLine(llm.Anthropic, v)
		require.True(t, ok)
		require.JSONEq(t, `{"custom_id":"x","result":{"type":"errored","error":`+bad+`}}`, string(line))
		line, ok = jobsapi.ResultLine(llm.OpenAI, jobsapi.JobView{ID: 4, CustomID: "x", State: "dead", Error: &jobsapi.ErrorView{Type: "expired", Message: "deadline passed"}})
		require.True(t, ok)
		require.JSONEq(t, `{"id":"batch_req_4","custom_id":"x","response":null,"error":{"code":"batch_expired","message":"deadline passed"}}`, string(line))
		line, ok = jobsapi.ResultLine(llm.Anthropic, jobsapi.JobView{CustomID: "c", State: "canceled"})
		require.True(t, ok)
		require.JSONEq(t, `{"custom_id":"c","result":{"type":"canceled"}}`, string(line))
		_, ok = jobsapi.ResultLine(llm.Anthropic, jobsapi.JobView{CustomID: "q", State: "queued"})
		require.False(t, ok)
	})
}

func must(_ int, b []byte) []byte { return b }

func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	s := newService(t, nil, succeed(), nil, func(c *config) { c.API.MaxBatchBytes = 2000; c.Owner = "manual" })
	h := s.Handler()
	cases := []struct {
		name, target, file string
		status             int
		want               string
		lines              []int
	}{
		{"no upstream", "/v1/batches", anthropicLine("a"), 400, "name the upstream", nil},
		{"unknown upstream", "/v1/batches?upstream=nope", anthropicLine("a"), 400, "unknown upstream", nil},
		{"wrong shape for upstream", "/v1/batches?upstream=gpt", anthropicLine("a"), 400, "speaks openai", nil},
		{"bad priority", "/v1/batches?upstream=claude&priority=now", anthropicLine("a"), 400, "priority", nil},
		{"bad skip flag", "/v1/batches?upstream=claude&skip_invalid=maybe", anthropicLine("a"), 400, "skip_invalid", nil},
		{"malformed lines", "/v1/batches?upstream=claude", anthropicLine("a") + "\nnope\n" + anthropicLine("a") + "\n" + `{"custom_id":"m","params":{"model":"x"}}`, 400, "3 invalid line(s), first on line 2", []int{2, 3, 4}},
		{"empty", "/v1/batches?upstream=claude", "", 400, "no requests", nil},
		{"too large", "/v1/batches?upstream=claude", strings.Repeat(anthropicLine("a")+"\n", 30), 413, "exceeds", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, h, "POST", tc.target, tc.file)
			require.Equal(t, tc.status, code, string(body))
			e := decode[jobsapi.APIError](t, body)
			require.Contains(t, e.Error.Message, tc.want)
			var lines []int
			for _, l := range e.Error.Lines {
				lines = append(lines, l.Line)
			}
			require.Equal(t, tc.lines, lines)
		})
	}
	_, body := do(t, h, "GET", "/v1/jobs", "")
	require.Empty(t, decode[jobsapi.ListResponse](t, body).Data, "a rejected batch queues nothing")

	code, body := do(t, h, "POST", "/v1/batches?upstream=claude&skip_invalid=true", anthropicLine("a")+"\nnope\n"+anthropicLine("b"), jobsapi.UpstreamHeader, "ignored")
	require.Equal(t, 200, code, string(body))
	b := decode[jobsapi.BatchView](t, body)
	require.Equal(t, 2, b.Total)
	require.Len(t, b.Skipped, 1)
	require.Equal(t, 2, b.Skipped[0].Line)
	code, body = do(t, h, "POST", "/v1/batches/"+b.ID+"/cancel", "")
	require.Equal(t, 200, code, string(body))
	v := decode[jobsapi.BatchView](t, body)
	require.Equal(t, "ended", v.ProcessingStatus)
	require.Equal(t, 2, v.RequestCounts.Canceled)
	_, body = do(t, h, "GET", "/v1/batches/"+b.ID+"/results", "")
	require.Equal(t, 2, strings.Count(string(body), `"type":"canceled"`))
}

package mock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Responses streaming: named SSE events whose data carries the same type
// and a sequence_number from 0:
//
//	response.created (queued for background, else in_progress)
//	response.in_progress
//	[response.output_item.added, response.output_item.done: the reasoning item]
//	response.output_item.added (the message, in_progress, no content)
//	response.content_part.added (an empty output_text)
//	response.output_text.delta × visible tokens
//	response.output_text.done
//	response.content_part.done
//	response.output_item.done (completed, or incomplete)
//	response.completed | response.incomplete (with usage)
//
// An injected stream fault ends the stream after that many deltas with
// response.failed (status failed, error server_error, usage so far).

// responseStream writes one response's events.
type responseStream struct {
	x   *exchange
	seq int
	at  time.Time // the instant the stream has slept to
}

func (rs *responseStream) send(event string, data map[string]any) {
	data["type"] = event
	data["sequence_number"] = rs.seq
	rs.seq++
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{"type":"error","code":"server_error","message":"encoding event","param":null}`)
	}
	_, _ = fmt.Fprintf(rs.x.w, "event: %s\ndata: %s\n\n", event, b)
	flush(rs.x.w)
}

// until sleeps to t on the mock's clock; false when the client left.
func (rs *responseStream) until(t time.Time) bool {
	if !t.After(rs.at) {
		return true
	}
	d := t.Sub(rs.at)
	rs.at = t
	return rs.x.sleep(d)
}

// streamResponse streams sr; it returns the output tokens produced.
func (x *exchange) streamResponse(sr *storedResponse) int64 {
	x.commonHeaders("text/event-stream; charset=utf-8")
	x.w.Header().Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.s.stats.status(x.key, http.StatusOK)
	rs := &responseStream{x: x, at: x.now}
	tl := sr.tl
	left := func(produced int64) int64 {
		if !sr.req.background { // a background response lives on without its stream
			now := x.s.clock.Now()
			x.s.responses.with(x.key, sr.id, func(sr *storedResponse) { sr.stoppedAt = now })
		}
		return produced
	}
	first := statusInProgress
	if sr.req.background {
		first = statusQueued
	}
	rs.send("response.created", map[string]any{"response": sr.renderAs(first, 0)})
	if !rs.until(tl.start) {
		return left(0)
	}
	rs.send("response.in_progress", map[string]any{"response": sr.renderAs(statusInProgress, 0)})
	out := 0
	if tl.reasoning > 0 {
		rs.send("response.output_item.added", map[string]any{"output_index": 0, "item": sr.reasoningItem()})
		if !rs.until(tl.tokenAt(tl.reasoning - 1)) {
			return left(tl.produced(x.s.clock.Now()))
		}
		rs.send("response.output_item.done", map[string]any{"output_index": 0, "item": sr.reasoningItem()})
		out = 1
	}
	ids := func(m map[string]any) map[string]any {
		m["item_id"], m["output_index"], m["content_index"] = sr.messageID, out, 0
		return m
	}
	rs.send("response.output_item.added", map[string]any{"output_index": out, "item": sr.messageItem(statusInProgress, "", false)})
	rs.send("response.content_part.added", ids(map[string]any{"part": textPart("")}))
	fail := func(visible int) int64 {
		produced := tl.reasoning + int64(visible)
		rs.send("response.failed", map[string]any{"response": sr.renderAs(statusFailed, produced)})
		return produced
	}
	for j, wd := range sr.words {
		if int64(j) == tl.failAfter {
			return fail(j)
		}
		if !rs.until(tl.tokenAt(tl.reasoning + int64(j))) {
			return left(tl.reasoning + int64(j))
		}
		rs.send("response.output_text.delta", ids(map[string]any{"delta": wd, "logprobs": []any{}}))
	}
	if tl.failAfter >= 0 {
		return fail(len(sr.words))
	}
	text := strings.Join(sr.words, "")
	rs.send("response.output_text.done", ids(map[string]any{"text": text, "logprobs": []any{}}))
	rs.send("response.content_part.done", ids(map[string]any{"part": textPart(text)}))
	st, event := statusCompleted, "response.completed"
	if tl.n >= sr.maxOut {
		st, event = statusIncomplete, "response.incomplete"
	}
	rs.send("response.output_item.done", map[string]any{"output_index": out, "item": sr.messageItem(st, text, true)})
	rs.send(event, map[string]any{"response": sr.renderAs(st, tl.n)})
	return tl.n
}

package batches

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/internal/llm"
)

// ListLimitDefault is the page size of List: the most OpenAI serves in
// one page (Anthropic serves up to 1,000).
const ListLimitDefault = 100

// ListParams pages the key's batches, newest first (both providers list
// them so).
type ListParams struct {
	// After is the id of the last batch of the previous page; empty for
	// the first page.
	After string
	// Limit is the page size, 1 to 100. Defaults to ListLimitDefault.
	Limit int
}

// Page is one page of batches, newest first.
type Page struct {
	Batches []*Batch
	// HasMore reports that older batches follow: pass the last one's id
	// as ListParams.After.
	HasMore bool
}

// List reads one page of the key's batches (Anthropic GET
// /v1/messages/batches?after_id=; OpenAI GET /v1/batches?after=).
func (c *Client) List(ctx context.Context, p ListParams) (Page, error) {
	limit := p.Limit
	if limit == 0 {
		limit = ListLimitDefault
	}
	if limit < 1 || limit > 100 {
		return Page{}, fmt.Errorf("listing batches: %w: limit %d is not in [1, 100]", ErrInvalid, limit)
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	r := request{op: "listing batches", method: http.MethodGet}
	var out Page
	if c.cfg.Protocol == llm.OpenAI {
		if p.After != "" {
			q.Set("after", p.After)
		}
		r.path = "/v1/batches?" + q.Encode()
		var l struct {
			Data    []llm.OpenAIBatch `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := c.call(ctx, r, &l); err != nil {
			return Page{}, err
		}
		for _, ob := range l.Data {
			out.Batches = append(out.Batches, fromOpenAIBatch(ob))
		}
		out.HasMore = l.HasMore
		return out, nil
	}
	if p.After != "" {
		q.Set("after_id", p.After)
	}
	r.path = "/v1/messages/batches?" + q.Encode()
	var l llm.MessageBatchList
	if err := c.call(ctx, r, &l); err != nil {
		return Page{}, err
	}
	for _, mb := range l.Data {
		out.Batches = append(out.Batches, fromMessageBatch(mb))
	}
	out.HasMore = l.HasMore
	return out, nil
}

package server

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
)

// newPassthrough builds the reverse proxy for the paths of u that Sluice
// does not schedule (models, count_tokens, batches, files, ...): forwarded
// as they are, with the client's credentials swapped for the upstream key,
// streamed with immediate flushes.
func (s *Server) newPassthrough(u *upstream, transport http.RoundTripper) *httputil.ReverseProxy {
	prefix := "/" + u.cfg.Name
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			pr.Out.URL.RawPath = ""
			pr.SetURL(u.target)
			for _, k := range credentialHeaders {
				pr.Out.Header.Del(k)
			}
			for _, k := range sluiceRequestHeaders {
				pr.Out.Header.Del(k)
			}
			setUpstreamKey(pr.Out.Header, u.cfg.Protocol, u.cfg.APIKey)
		},
		Transport:     transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			setSluiceHeaders(resp.Header, 0, 1)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			reqID := newRequestID()
			if r.Context().Err() != nil {
				return // client gone
			}
			// The error may name the upstream URL but never holds the key;
			// it is logged, not sent.
			s.log.Warn("pass-through request failed", "upstream", u.cfg.Name, "path", r.URL.Path, "request_id", reqID, "err", err)
			h := http.Header{}
			h.Set("X-Should-Retry", "true")
			writeProviderError(w, u.cfg.Protocol, reqID, http.StatusBadGateway, "",
				"the gateway could not reach the upstream (request id "+reqID+")", h)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// servePassthrough forwards r to the upstream as it is.
func (s *Server) servePassthrough(w http.ResponseWriter, r *http.Request, u *upstream) {
	s.metrics.passthroughRequest(u.cfg.Name)
	u.proxy.ServeHTTP(w, r)
}

// setUpstreamKey puts the upstream's own key where its protocol expects it.
func setUpstreamKey(h http.Header, p llm.Protocol, key string) {
	if p == llm.OpenAI {
		h.Set("Authorization", "Bearer "+key)
		return
	}
	h.Set("X-Api-Key", key)
}

package provider_test

// Real captures and documented examples quoted in
// /work/shared/provider-semantics.md, used as table rows and fuzz seeds.

const (
	// §1.4 429 rate limit (sent with retry-after: 11).
	anthropic429 = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (1815e560-bf0c-433e-b03a-793524e11fda) of 50,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."},"request_id":"req_011CXQugkT1ZmWRCq9gdSrAa"}`
	// §1.4 tier spend cap, no retry-after.
	anthropicSpendCap  = `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-09-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_018EeWyXxfu5pfWkrYcMdjWG"}`
	anthropic529       = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_01ICfHarEhQMSJqNvS9fBxcw"}`
	anthropic529Detail = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded","details":null},"request_id":"req_01ICfHarEhQMSJqNvS9fBxcw"}`
	anthropicCredit    = `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"req_x"}`
	anthropicUsageCap  = `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC."},"request_id":"req_x"}`
	anthropicWSCap     = `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified workspace API usage limits."},"request_id":"req_x"}`
	anthropicTooLong   = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"},"request_id":"req_..."}`
	anthropic404       = `{"type":"error","error":{"type":"not_found_error","message":"The requested resource could not be found."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	anthropic401       = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_..."}`

	// §2.3 OpenAI bodies.
	openAI429TPM  = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-abc on tokens per min (TPM): Limit 200000, Used 163084, Requested 62318. Please try again in 7.62s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openAI429RPM  = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	openAITooBig  = `{"error":{"message":"Request too large for gpt-4 in organization org-CaYnsbEInKCQdIJTzX5guEqV on tokens per min (TPM): Limit 10000, Requested 10770. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openAIQuota   = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	openAICredit  = `{"error":{"message":"You have no credits remaining.","type":"insufficient_quota","param":null,"code":"credit_balance_exhausted"}}`
	openAIOrgCap  = `{"error":{"message":"Organization usage limit reached.","type":"invalid_request_error","param":null,"code":"organization_usage_limit_exceeded"}}`
	openAISlow    = `{"error":{"message":"Slow Down: A sudden increase in your request rate is impacting service reliability. Please reduce your request rate to its original level, maintain a consistent rate for at least 15 minutes, and then gradually increase it.","type":"server_error","param":null,"code":null}}`
	openAI503     = `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`
	openAI500     = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	openAIContext = `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	gatewayRate   = `{"error":{"message":"Too many requests","type":"rate_limit_error"}}`

	// §3 Gemini.
	gemini429     = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 16000, model: gemma-4-31b\nPlease retry in 29.943570175s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemma-4-31b"},"quotaValue":"16000"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"29s"}]}}`
	gemini429Day  = `{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"250"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}`
	gemini429Zero = `{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaValue":"0"}]}]}}`
	gemini503     = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`

	html502 = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n"

	// §1.5 / §2.4 non-streaming responses.
	anthropicMessage = `{"id":"msg_01FqfsLoHwgeFbguDgpz48m7","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hello! How can I assist you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":34,"service_tier":"standard"}}`
	openAICompletion = `{"id":"chatcmpl-abc123","object":"chat.completion","created":1716000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0123456789","service_tier":"default","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`

	// §1.6 exact basic stream.
	anthropicStream = "event: message_start\n" +
		`data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}` + "\n\n" +
		"event: content_block_start\n" +
		`data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}` + "\n\n" +
		"event: ping\n" +
		`data: {"type": "ping"}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}` + "\n\n" +
		"event: content_block_stop\n" +
		`data: {"type": "content_block_stop", "index": 0}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}` + "\n\n" +
		"event: message_stop\n" +
		`data: {"type": "message_stop"}` + "\n\n"

	anthropicStreamError = "event: error\n" +
		`data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}` + "\n\n"

	// §2.5 stream with include_usage.
	openAIStream = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1716000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1716000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1716000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1716000000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}` + "\n\n" +
		"data: [DONE]\n\n"

	openAIStreamError = `data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}` + "\n\n"

	anthropicRequest = `{"model":"claude-sonnet-4-5-20250929","max_tokens":1024,"system":"You are terse.","messages":[{"role":"user","content":"Hello, Claude"}]}`
	openAIRequest    = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello!"}],"max_completion_tokens":256,"n":2,"stream":true}`
)

// OpenAI Responses API (spec §2.6; shapes of the openai-go v3 types and the
// streaming guide's example).
const (
	responsesObject = `{"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"service_tier":"flex","store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}`

	responsesStream = "event: response.created\n" +
		`data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1741290958,"status":"in_progress","error":null,"output":[],"service_tier":"auto","usage":null}}` + "\n\n" +
		"event: response.in_progress\n" +
		`data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}` + "\n\n" +
		"event: response.output_item.added\n" +
		`data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}` + "\n\n" +
		"event: response.content_part.added\n" +
		`data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}` + "\n\n" +
		"event: response.output_text.delta\n" +
		`data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[]}` + "\n\n" +
		"event: response.output_text.done\n" +
		`data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hi","logprobs":[]}` + "\n\n" +
		"event: response.content_part.done\n" +
		`data: {"type":"response.content_part.done","sequence_number":6,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Hi","annotations":[]}}` + "\n\n" +
		"event: response.output_item.done\n" +
		`data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}}` + "\n\n" +
		"event: response.completed\n" +
		`data: {"type":"response.completed","sequence_number":8,"response":{"id":"resp_1","object":"response","status":"completed","service_tier":"default","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":1024},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":48}}}` + "\n\n"

	responsesFailed = "event: response.failed\n" +
		`data: {"type":"response.failed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The server had an error while processing your request. Sorry about that!"},"service_tier":"default","output":[],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":39}}}` + "\n\n"

	responsesErrorEvent = "event: error\n" +
		`data: {"type":"error","sequence_number":3,"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-4.1 on tokens per min (TPM).","param":null}` + "\n\n"

	responsesIncomplete = "event: response.incomplete\n" +
		`data: {"type":"response.incomplete","sequence_number":20,"response":{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"service_tier":"flex","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":26}}}` + "\n\n"

	embeddingsList = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`

	anthropicCachedMessage = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":3000,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":40,"output_tokens_details":{"thinking_tokens":12},"service_tier":"priority"}}`
)

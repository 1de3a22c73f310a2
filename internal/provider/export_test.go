package provider

import "github.com/sluicehq/sluice/internal/llm"

// EstimateReference and ScanEstimate expose the two estimators to the
// external tests, which hold them to the same answers.
var (
	EstimateReference = estimateReference
	ScanEstimate      = scanEstimate
)

// ParseUsageReference and ScanUsageDoc expose the two usage readers;
// ObserveOpenAIReference feeds one chunk to the reference handler.
var (
	ParseUsageReference = parseUsageReference
	ScanUsageDoc        = scanUsageDoc
)

// OpenAIChunkBoth runs one OpenAI chunk through the scanner (when it
// answers) and the reference observer, and returns both observers' views.
func OpenAIChunkBoth(data []byte) (scanned, reference *StreamObserver, answered bool) {
	scanned, reference = NewStreamObserver(llm.OpenAI), NewStreamObserver(llm.OpenAI)
	choices, errSpan, u, hasUsage, ok := scanOpenAIChunk(data)
	if ok {
		if errSpan.end != 0 {
			scanned.recordError(data)
		} else {
			scanned.content = choices
			scanned.usage, scanned.hasUsage = u, hasUsage
		}
	}
	reference.handleOpenAIReference(data)
	return scanned, reference, ok
}

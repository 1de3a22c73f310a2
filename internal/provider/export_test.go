package provider

// EstimateReference and ScanEstimate expose the two estimators to the
// external tests, which hold them to the same answers.
var (
	EstimateReference = estimateReference
	ScanEstimate      = scanEstimate
)

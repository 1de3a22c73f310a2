package flow

import "fmt"

// Dim is one quota dimension the Limiter mirrors.
type Dim int

// The quota dimensions, as the providers count them.
const (
	// Requests is requests per minute (RPM).
	Requests Dim = iota
	// InputTokens is input tokens per minute (Anthropic ITPM).
	InputTokens
	// OutputTokens is output tokens per minute (Anthropic OTPM).
	OutputTokens
	// Tokens is combined input+output tokens per minute (OpenAI TPM,
	// Anthropic tokens-*).
	Tokens
)

// NumDims is how many dimensions there are.
const NumDims = 4

var dimNames = [NumDims]string{"requests", "input_tokens", "output_tokens", "tokens"}

func (d Dim) String() string {
	if d < 0 || d >= NumDims {
		return fmt.Sprintf("dim(%d)", int(d))
	}
	return dimNames[d]
}

// Amount is a quantity in every dimension, e.g. the cost of one request.
type Amount [NumDims]float64

// NewAmount returns the cost of one request with the given token counts:
// one request, in input tokens, out output tokens and in+out combined.
func NewAmount(in, out int64) Amount {
	return Amount{1, float64(in), float64(out), float64(in + out)}
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// Sub returns a-b.
func (a Amount) Sub(b Amount) Amount {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

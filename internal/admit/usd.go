package admit

import "strconv"

// USD is a cost in US dollars (what SpentOn answers) as the logs write it: in decimals
// (0.00000615), never in exponent form (6.15e-06), both in a text log
// (MarshalText) and as a JSON number (MarshalJSON). Log it with
// slog.Any("cost_usd", admit.USD(v)).
type USD float64

func (u USD) format() []byte { return strconv.AppendFloat(nil, float64(u), 'f', -1, 64) }

// MarshalText implements encoding.TextMarshaler (slog's text handler).
func (u USD) MarshalText() ([]byte, error) { return u.format(), nil }

// MarshalJSON implements json.Marshaler: a number, in decimals.
func (u USD) MarshalJSON() ([]byte, error) { return u.format(), nil }

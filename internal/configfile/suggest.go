package configfile

import "strings"

// Suggest returns the known word got abbreviates (its words' initials:
// rpm for requests_per_minute), else the known word nearest to got by edit distance when it is
// close enough to be what was meant (at most a third of its length, and 2
// edits at least), else "".
func Suggest(got string, known []string) string {
	for _, k := range known {
		if len(got) > 1 && got == initials(k) {
			return k // rpm: requests_per_minute
		}
	}
	best, bestD := "", -1
	for _, k := range known {
		d := editDistance(got, k)
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 || bestD > max(2, len(got)/3) || bestD >= len(got) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (config keys are ASCII).
func editDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// initials returns the first letter of each _-separated word of s.
func initials(s string) string {
	var b []byte
	for _, w := range strings.Split(s, "_") {
		if w != "" {
			b = append(b, w[0])
		}
	}
	return string(b)
}

package configfile

// Suggest returns the known word nearest to got by edit distance when it is
// close enough to be what was meant (at most a third of its length, and 2
// edits at least), else "".
func Suggest(got string, known []string) string {
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

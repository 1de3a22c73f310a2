package scenario

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// counters are Prometheus samples by name, each with its label pairs.
type counters map[string][]metricSample

type metricSample struct {
	labels map[string]string
	value  float64
}

// sum adds the samples of name whose labels include every pair of match.
func (c counters) sum(name string, match map[string]string) float64 {
	var total float64
	for _, s := range c[name] {
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// scrapeMetrics reads the gateway's GET /metrics.
func scrapeMetrics(ctx context.Context, client *http.Client, base string) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("building metrics request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping gateway metrics: status %d", resp.StatusCode)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text exposition format: one sample
// per line as name{label="value",...} value [timestamp]; comments and
// blank lines are skipped, malformed lines are an error naming the line.
func parseMetrics(r io.Reader) (counters, error) {
	out := counters{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("parsing metrics line %d: %w", n, err)
		}
		out[name] = append(out[name], s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

func parseSample(line string) (string, metricSample, error) {
	s := metricSample{labels: map[string]string{}}
	var name, rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		name = line[:i]
		var err error
		rest, err = parseLabels(line[i+1:], s.labels)
		if err != nil {
			return "", metricSample{}, err
		}
	} else {
		var ok bool
		name, rest, ok = strings.Cut(line, " ")
		if !ok {
			return "", metricSample{}, fmt.Errorf("no value in %q", line)
		}
	}
	if name == "" {
		return "", metricSample{}, fmt.Errorf("no metric name in %q", line)
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return "", metricSample{}, fmt.Errorf("want a value and an optional timestamp after %q", name)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", metricSample{}, fmt.Errorf("value of %s: %w", name, err)
	}
	if math.IsNaN(v) {
		v = 0
	}
	s.value = v
	return name, s, nil
}

// parseLabels reads label pairs up to the closing brace into into and
// returns what follows it.
func parseLabels(s string, into map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("malformed labels near %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated value of label %q", key)
		}
		into[key] = val.String()
		s = s[i+1:]
	}
}

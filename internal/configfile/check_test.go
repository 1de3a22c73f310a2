package configfile

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testLimits struct {
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	MaxConcurrency    int   `yaml:"max_concurrency"`
}

type testKey struct {
	Key    string     `yaml:"key"`
	Limits testLimits `yaml:"limits"`
}

func (k *testKey) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&k.Key)
	}
	type plain testKey
	return n.Decode((*plain)(k))
}

type testInline struct {
	Day float64 `yaml:"day"`
}

type testUpstream struct {
	Name           string            `yaml:"name"`
	Protocol       string            `yaml:"protocol"`
	BaseURL        string            `yaml:"base_url"`
	APIKeys        []testKey         `yaml:"api_keys"`
	Limits         testLimits        `yaml:"limits"`
	RequestTimeout time.Duration     `yaml:"request_timeout"`
	Models         map[string]string `yaml:"models"`
	Budget         testInline        `yaml:",inline"`
}

type testConfig struct {
	Listen      string         `yaml:"listen"`
	AllowPublic bool           `yaml:"allow_public"`
	Upstreams   []testUpstream `yaml:"upstreams"`
	Internal    string         `yaml:"-"`
}

var testEnums = Enums{"upstreams[].protocol": {"anthropic", "openai"}}

func check(t *testing.T, doc string) error {
	t.Helper()
	root, err := Parse([]byte(doc))
	if err != nil {
		return err
	}
	return Check(root, reflect.TypeFor[testConfig](), testEnums)
}

// TestCheckNamesFieldLineAndFix: every kind of mistake is one line with
// the line, the full YAML path, what is wrong in YAML's words and, where
// there is one, the fix.
func TestCheckNamesFieldLineAndFix(t *testing.T) {
	t.Parallel()
	const up = "upstreams:\n  - name: a\n    protocol: anthropic\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"typo", up + "    limits:\n      request_per_minute: 50\n",
			"line 5: upstreams[0].limits.request_per_minute: unknown field; did you mean requests_per_minute?"},
		{"not a number", up + "    limits:\n      requests_per_minute: fifty\n",
			`line 5: upstreams[0].limits.requests_per_minute: want a whole number, got "fifty"`},
		{"fraction", up + "    limits: {max_concurrency: 1.5}\n",
			"line 4: upstreams[0].limits.max_concurrency: want a whole number, got the number 1.5"},
		{"overflow", up + "    limits: {requests_per_minute: 99999999999999999999}\n",
			"upstreams[0].limits.requests_per_minute: want a whole number"},
		{"duration without unit", up + "    request_timeout: 10\n",
			"line 4: upstreams[0].request_timeout: got 10: durations need a unit: 10s"},
		{"duration in days", up + "    request_timeout: 7d\n",
			`upstreams[0].request_timeout: got "7d": durations have no day unit: 168h`},
		{"duration nonsense", up + "    request_timeout: soon\n",
			`upstreams[0].request_timeout: want a duration such as 500ms, 30s, 5m or 1h, got "soon"`},
		{"bool", "allow_public: maybe\n", `line 1: allow_public: want true or false, got "maybe"`},
		{"list wanted", "upstreams: {name: a}\n", "line 1: upstreams: want a list (- item, or [a, b]), got a mapping"},
		{"mapping wanted", up + "    limits: 50\n", "line 4: upstreams[0].limits: want a mapping (field: value), got the number 50"},
		{"string wanted", "listen: [a, b]\n", "line 1: listen: want a string, got a list"},
		{"enum", up + "  - name: b\n    protocol: antropic\n",
			`line 5: upstreams[1].protocol: "antropic" is not one of anthropic, openai; did you mean anthropic?`},
		{"indented too far", up + "    limits:\n      name: x\n",
			"upstreams[0].limits.name: unknown field here; name is a field of upstreams[0]: check its indentation"},
		{"unknown, no near miss", "zzzzzz: 1\n", "line 1: zzzzzz: unknown field; the fields here are listen, allow_public, upstreams"},
		{"ignored field", "internal: x\n", "line 1: internal: unknown field"},
		{"inline field", up + "    day: soon\n", `upstreams[0].day: want a number, got "soon"`},
		{"key as list", up + "    api_keys: [[x]]\n", "upstreams[0].api_keys[0]: want a string or a mapping, got a list"},
		{"key object typo", up + "    api_keys: [{key: k, limit: {}}]\n", "upstreams[0].api_keys[0].limit: unknown field; did you mean limits?"},
		{"map value", up + "    models: {gpt-4.1: [x]}\n", "upstreams[0].models.gpt-4.1: want a string, got a list"},
		{"odd map key", up + "    models: {'a b': [x]}\n", `upstreams[0].models["a b"]: want a string, got a list`},
		{"duplicate", "listen: a\nlisten: b\n", "line 2: listen: given twice (first at line 1)"},
		{"empty", "", "the file is empty"},
		{"comment only", "# nothing\n", "the file is empty"},
		{"not a mapping", "- a\n", "want a mapping (field: value), got a list"},
		{"mis-indented key", up + "   base_url: x\n",
			"line 4: YAML syntax: this line is indented 3 spaces, which lines up with no line above it"},
		{"tab", up + "\tbase_url: x\n", "line 4: YAML syntax: indented with a tab"},
		{"syntax", "listen: [a\n", "YAML syntax:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := check(t, tc.doc)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), "int64")
			require.NotContains(t, err.Error(), "time.Duration")
			var ce *Error
			require.ErrorAs(t, err, &ce)
		})
	}
}

func TestCheckAcceptsWhatTheDecoderTakes(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"listen: 127.0.0.1:1\nallow_public: true\n",
		"upstreams:\n  - name: 5\n    protocol: OpenAI\n    request_timeout: 1m30s\n    limits: {requests_per_minute: 0x10, max_concurrency: ~}\n",
		"upstreams: [{name: a, api_keys: [k1, {key: k2, limits: {max_concurrency: 2}}], models: {a: b}, day: 1.5}]\n",
		"upstreams:\n  - &u {name: a, request_timeout: 0s}\n  - *u\n",
		"upstreams:\n",
	} {
		err := check(t, doc)
		require.NoError(t, err, doc)
		root, err := Parse([]byte(doc))
		require.NoError(t, err)
		var cfg testConfig
		require.NoError(t, root.Decode(&cfg), doc)
	}
}

func TestAtFindsTheLine(t *testing.T) {
	t.Parallel()
	root, err := Parse([]byte("listen: x\nupstreams:\n  - name: a\n  - name: b\n    models:\n      gpt-4.1: x\n"))
	require.NoError(t, err)
	for _, tc := range []struct {
		msg  string
		line int
		path string
	}{
		{"upstreams[1].name: duplicate", 4, "upstreams[1].name"},
		{"upstreams[1].retry.base_delay: must be >= 0", 4, "upstreams[1].retry.base_delay"}, // not in the file: its upstream
		{"upstreams[1].models.gpt-4.1: bad", 6, "upstreams[1].models.gpt-4.1"},
		{"upstreams[7].name: x", 2, "upstreams[7].name"},
		{"listen: 0.0.0.0:80 is public", 1, "listen"},
		{"store: bad", 0, "store"},
	} {
		err := At(root, textError(tc.msg))
		var ce *Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, tc.line, ce.Line, tc.msg)
		require.Equal(t, tc.path, ce.Path, tc.msg)
	}
	err = At(root, textError("something without a path"))
	require.Equal(t, "something without a path", err.Error())
	require.Equal(t, "f.yaml:3: a: b", InFile(&Error{Line: 3, Path: "a", Msg: "b"}, "f.yaml").Error())
}

type textError string

func (e textError) Error() string { return string(e) }

func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"requests_per_minute", "tokens_per_minute", "max_concurrency", "limits"}
	require.Equal(t, "requests_per_minute", Suggest("request_per_minute", known))
	require.Equal(t, "limits", Suggest("limit", known))
	require.Equal(t, "requests_per_minute", Suggest("rpm", known))
	require.Equal(t, "tokens_per_minute", Suggest("tpm", known))
	require.Equal(t, "max_concurrency", Suggest("max_concurency", known))
	require.Empty(t, Suggest("colour", known))
	require.Empty(t, Suggest("x", []string{"y"}))
}

// FuzzCheck: no input makes Parse, Check or At panic, and what Check
// accepts the decoder decodes.
func FuzzCheck(f *testing.F) {
	f.Add([]byte("upstreams: [{name: a, api_keys: [k, {key: j}], request_timeout: 10}]"))
	f.Add([]byte("a: &x [*x]"))
	f.Add([]byte("upstreams:\n  - name: a\n   limits: x\n\tb: c\n"))
	f.Add([]byte("listen: |\n  x\n y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Parse(data)
		if err != nil {
			return
		}
		if Check(root, reflect.TypeFor[testConfig](), testEnums) == nil {
			var cfg testConfig
			_ = root.Decode(&cfg) // an alias cycle may still fail; it must not panic
		}
		_ = At(root, textError("upstreams[0].limits.x: y"))
	})
}

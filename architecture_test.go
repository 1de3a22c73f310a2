package sluice_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowedImports is the layering docs/architecture.md draws: for each
// package of the module, the module's packages it may import. A new arrow
// must be added here and to the doc together, so the picture stays true.
var allowedImports = map[string][]string{
	".":                              {"internal/clock", "internal/dispatch", "internal/flow", "internal/frontdoor", "internal/llm", "internal/provider", "internal/webhook", "upstream"},
	"upstream":                       {},
	"cmd/sluice":                     {"internal/admit", "internal/clientsapi", "internal/clock", "internal/jobs", "internal/jobsapi", "internal/jobstore", "internal/membudget", "internal/mock", "internal/opsview", "internal/scenario", "internal/server"},
	"internal/clock":                 {},
	"internal/lifecycle":             {},
	"internal/membudget":             {"internal/clock"},
	"internal/storelink":             {"internal/clock", "internal/lifecycle"},
	"internal/llm":                   {"upstream"},
	"internal/provider":              {"internal/llm"},
	"internal/provider/batches":      {"internal/clock", "internal/llm", "internal/provider"},
	"internal/flow":                  {"internal/llm"},
	"internal/dispatch":              {"internal/clock", "internal/flow", "internal/lifecycle", "internal/llm", "internal/provider", "upstream"},
	"internal/frontdoor":             {"internal/dispatch", "internal/llm", "internal/provider"},
	"internal/jobstore":              {"internal/clock", "internal/lifecycle", "internal/llm"},
	"internal/jobstore/jobstoretest": {"internal/jobstore", "internal/llm"},
	"internal/jobs":                  {"internal/admit", "internal/clock", "internal/dispatch", "internal/flow", "internal/frontdoor", "internal/jobsapi", "internal/jobstore", "internal/lifecycle", "internal/llm", "internal/provider", "internal/provider/batches", "internal/webhook", "upstream"},
	"internal/jobsapi":               {"internal/clock", "internal/frontdoor", "internal/jobstore", "internal/llm", "internal/provider"},
	"internal/webhook":               {},
	"internal/configfile":            {},
	"internal/configfile/schemagen":  {"internal/server"},
	"internal/server":                {"internal/admit", "internal/clients", "internal/clientsapi", "internal/clock", "internal/configfile", "internal/dispatch", "internal/flow", "internal/frontdoor", "internal/jobs", "internal/jobsapi", "internal/jobstore", "internal/lifecycle", "internal/llm", "internal/membudget", "internal/opsview", "internal/provider", "internal/storelink", "internal/webhook", "upstream"},
	"internal/opsview":               {"internal/admit", "internal/clock", "internal/cluster", "internal/dispatch", "internal/flow", "internal/jobs", "internal/jobsapi", "internal/jobstore", "internal/lifecycle", "internal/llm", "internal/provider", "internal/quota", "upstream"},
	"internal/pricing":               {"internal/llm", "internal/provider"},
	"internal/quota":                 {"internal/pricing"},
	"internal/mock":                  {"internal/clock", "internal/lifecycle"},
	"internal/cluster":               {"internal/clock", "internal/flow", "internal/lifecycle", "internal/llm", "internal/storelink"},
	"internal/cluster/clustertest":   {"internal/cluster", "internal/flow"},
	"internal/admit":                 {"internal/clock", "internal/cluster", "internal/dispatch", "internal/flow", "internal/frontdoor", "internal/jobstore", "internal/lifecycle", "internal/llm", "internal/pricing", "internal/provider", "internal/quota", "internal/storelink", "upstream"},
	"internal/clients":               {"internal/admit", "internal/clock", "internal/frontdoor", "internal/jobstore", "internal/lifecycle", "internal/llm"},
	"internal/clientsapi":            {"internal/admit", "internal/clients", "internal/clock", "internal/frontdoor", "internal/jobsapi", "internal/jobstore"},
	"internal/scenario":              {"internal/clock", "internal/frontdoor", "internal/llm", "internal/mock", "internal/opsview", "internal/server", "upstream"},
	"deploy":                         {},
}

// TestArchitecture checks every package's imports of the module's own
// packages against allowedImports: the store and the engine stay apart,
// the job API stays off the engine and the runtime (no dispatch, no jobs),
// the mock stays independent of the code it checks, nothing but the CLI
// and the scenarios imports the server (the clients API neither: the
// server mounts it), and the server reaches the price
// table, the spend ledger and the cluster only through the admission
// layer and the operator view.
func TestArchitecture(t *testing.T) {
	t.Parallel()
	const module = "github.com/sluicehq/sluice"
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg == "" {
			pkg = "."
		}
		allowed, known := allowedImports[pkg]
		require.True(t, known, "package %s is not in the architecture: add it to allowedImports and docs/architecture.md", pkg)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			require.True(t, slices.Contains(allowed, dep), "%s imports %s, which docs/architecture.md does not allow", pkg, dep)
		}
	}
	require.NoError(t, sc.Err())
}

// serverLinesMax bounds internal/server's production code (issue 23: the
// server speaks HTTP; the engine assembly, the admission rules and the
// operator read model live elsewhere).
const serverLinesMax = 3500

// TestServerStaysHTTP: internal/server's production files (its tests
// aside) stay under serverLinesMax lines, and it imports none of the price
// table, the spend ledger and the cluster (the admission layer and the
// operator view reach them), whatever allowedImports says.
func TestServerStaysHTTP(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("internal", "server", "*.go"))
	require.NoError(t, err)
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		lines += bytes.Count(b, []byte("\n"))
	}
	require.Positive(t, lines)
	require.Less(t, lines, serverLinesMax, "internal/server has %d production lines: move what is not HTTP out of it", lines)

	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{join .Imports "\n"}}`, "./internal/server").Output()
	require.NoError(t, err)
	for _, banned := range []string{"internal/quota", "internal/pricing", "internal/cluster"} {
		require.NotContains(t, strings.Fields(string(out)), "github.com/sluicehq/sluice/"+banned, "internal/server imports %s", banned)
	}
}

package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var (
	tmpRoot  string   // removed after the tests
	cleanups []func() // run after the tests (processes shared by tests); appended under a sync.Once
)

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "sluice-deploy-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	_ = os.RemoveAll(tmpRoot)
	if code == 0 {
		// Helm's Kubernetes client libraries start klog's flush daemon at
		// init; it is theirs, not a leak of the code under test.
		if err := goleak.Find(goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The stamp the test binary is built with; --version must print it.
const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	testDate    = "2026-01-02T03:04:05Z"
)

var (
	binaryOnce sync.Once
	binaryPath string
	errBinary  error
)

// staticBinary builds sluice for linux on this machine's architecture with
// deploy/build.sh, the build the Dockerfile runs, once per test run.
func staticBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		binaryPath = filepath.Join(tmpRoot, "bin", "sluice")
		cmd := exec.Command("bash", "build.sh", binaryPath)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH,
			"VERSION="+testVersion, "COMMIT="+testCommit, "DATE="+testDate)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			errBinary = fmt.Errorf("deploy/build.sh: %w\n%s", err, out.String())
		}
	})
	require.NoError(t, errBinary)
	return binaryPath
}

// repoFile is a path relative to the repository's root.
func repoFile(parts ...string) string {
	return filepath.Join(append([]string{".."}, parts...)...)
}

// syncBuffer is a bytes.Buffer that a child process's output goroutine and
// the test may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

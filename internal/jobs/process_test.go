package jobs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The crash tests run the product itself: the sluice binary, built once
// from this module, as `sluice mock` (the provider, which counts every call
// it receives) and `sluice serve` (the gateway with its job queue), so a
// gateway can be SIGKILLed mid-flight and restarted on the same store.

// Bounds on every wait on a subprocess, so a broken build or a wedged
// process fails the test instead of hanging it.
const (
	buildTimeout = 3 * time.Minute
	startTimeout = 30 * time.Second
	stopTimeout  = 30 * time.Second
)

// gatewayEnv was the switch that re-ran this test binary as a stand-in
// gateway; the crash tests now run the real sluice binary. TestMain still
// honours the switch, so a stale caller gets a clear error, not a test run.
const gatewayEnv = "SLUICE_JOBS_TEST_GATEWAY"

func runTestGateway() int {
	fmt.Fprintln(os.Stderr, gatewayEnv+" is no longer used: the crash tests run `sluice serve` (see process_test.go)")
	return 2
}

// binary is the sluice binary shared by the tests that run it: built on
// first use, deleted when its last user finished (a later user rebuilds it,
// from the build cache).
var binary struct {
	mu    sync.Mutex
	users int
	dir   string
	path  string
	err   error
}

// sluiceBinary returns the path of a freshly built sluice binary, valid
// until t ends.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	binary.mu.Lock()
	defer binary.mu.Unlock()
	if binary.users == 0 {
		binary.path, binary.err = buildSluice()
	}
	require.NoError(t, binary.err)
	binary.users++
	t.Cleanup(func() {
		binary.mu.Lock()
		defer binary.mu.Unlock()
		if binary.users--; binary.users == 0 {
			_ = os.RemoveAll(binary.dir)
			binary.dir, binary.path = "", ""
		}
	})
	return binary.path
}

// buildSluice runs `go build -o DIR/sluice ./cmd/sluice` from the module
// root (two levels above this package). binary.mu is held.
func buildSluice() (string, error) {
	dir, err := os.MkdirTemp("", "sluice-jobs-test-")
	if err != nil {
		return "", fmt.Errorf("making the build directory: %w", err)
	}
	binary.dir = dir
	exe := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-o", exe, "./cmd/sluice")
	cmd.Dir = filepath.Join("..", "..")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("building sluice: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(buildTimeout)
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
		_ = cmd.Process.Kill()
		err = fmt.Errorf("timed out after %v: %w", buildTimeout, <-done)
	}
	if err != nil {
		return "", fmt.Errorf("building sluice: %w: %s", err, out.String())
	}
	return exe, nil
}

// process is a running sluice subprocess.
type process struct {
	name string
	cmd  *exec.Cmd
	addr string        // what followed the ready prefix on its stdout
	done chan struct{} // closed when it exited
	err  error         // its exit status, once done is closed
	logs *tailBuffer   // the end of its stdout and stderr
}

// startProcess runs `sluice args...` and waits until it printed a line
// starting with ready; the first word after the prefix is its address. The
// process is killed in t's cleanup, and its output logged if t failed.
func startProcess(t *testing.T, name, ready string, args ...string) *process {
	t.Helper()
	return startProcessMarking(t, name, ready, nil, args...)
}

// startProcessMarking is startProcess noting the jobs named by the lines
// of its output that hold one of marks (p.logs.jobsMarked).
func startProcessMarking(t *testing.T, name, ready string, marks []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, cmd: exec.Command(sluiceBinary(t), args...), done: make(chan struct{}), logs: &tailBuffer{max: 16 << 10, marks: marks}}
	lines := &lineWatcher{prefix: ready, found: make(chan string, 1), tee: p.logs}
	p.cmd.Stdout, p.cmd.Stderr = lines, p.logs
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, p.logs.String())
		}
	})
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case rest := <-lines.found:
		p.addr, _, _ = strings.Cut(rest, " ")
		return p
	case <-p.done:
		require.FailNow(t, name+" exited before it was ready", "%v\n%s", p.err, p.logs.String())
	case <-timer.C:
		require.FailNow(t, name+" was not ready in time", "%v\n%s", startTimeout, p.logs.String())
	}
	return nil
}

// stop sends sig and waits (bounded) for the exit; it reports whether the
// process is gone. Signalling a process that already exited is harmless.
func (p *process) stop(sig syscall.Signal) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// kill SIGKILLs the process: the crash.
func (p *process) kill(t *testing.T) {
	t.Helper()
	require.True(t, p.stop(syscall.SIGKILL), "%s survived SIGKILL", p.name)
}

// term stops the process gracefully and requires a clean exit.
func (p *process) term(t *testing.T) {
	t.Helper()
	require.True(t, p.stop(syscall.SIGTERM), "%s did not stop within %v of SIGTERM", p.name, stopTimeout)
	require.NoError(t, p.err, "%s exit status", p.name)
}

// lineWatcher passes output to tee and sends the rest of the first line
// that starts with prefix on found.
type lineWatcher struct {
	prefix string
	found  chan string
	tee    *tailBuffer
	mu     sync.Mutex
	line   []byte
	seen   bool
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	_, _ = w.tee.Write(b)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range b {
		if w.seen {
			break
		}
		if c != '\n' {
			w.line = append(w.line, c)
			continue
		}
		if rest, ok := strings.CutPrefix(string(w.line), w.prefix); ok {
			w.seen = true
			w.found <- strings.TrimSpace(rest)
		}
		w.line = w.line[:0]
	}
	return len(b), nil
}

// tailBuffer keeps the last max bytes written to it, and the jobs named
// (`"job":N`) by the writes that hold one of marks (a log line is one
// write).
type tailBuffer struct {
	max    int
	marks  []string
	mu     sync.Mutex
	buf    []byte
	marked map[string]bool
}

// jobField is a JSON log line's job attribute.
var jobField = regexp.MustCompile(`"job":(\d+)`)

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, line := range strings.Split(string(p), "\n") {
		if !slices.ContainsFunc(b.marks, func(m string) bool { return strings.Contains(line, m) }) {
			continue
		}
		if b.marked == nil {
			b.marked = map[string]bool{}
		}
		if m := jobField.FindStringSubmatch(line); m != nil {
			b.marked[m[1]] = true
		}
	}
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// jobsMarked is how many jobs a marked line named.
func (b *tailBuffer) jobsMarked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.marked)
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

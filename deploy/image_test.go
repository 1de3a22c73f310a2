package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"
)

// imageSource is what a COPY of the final stage copies: a file or an
// (empty) directory, with its mode.
type imageSource struct {
	file string      // a file on this machine; "" for an empty directory
	mode fs.FileMode // the source's permission bits
}

// imageSources says where the test finds each COPY source of the
// Dockerfile's final stage, keyed "STAGE:PATH" (a build stage's file) or
// ":PATH" (the build context's). A COPY the map lacks fails the test: teach
// it here, and the build stage must make the file (checked too).
func imageSources(t *testing.T) map[string]imageSource {
	return map[string]imageSource{
		// The golang image's CA bundle (Debian's ca-certificates); here
		// this Debian machine's.
		"build:/etc/ssl/certs/ca-certificates.crt": {file: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644},
		// deploy/build.sh's output: the same script the build stage runs.
		"build:/out/sluice": {file: staticBinary(t), mode: 0o755},
		// `mkdir -p /out/data` in the build stage.
		"build:/out/data":            {mode: 0o755},
		":deploy/docker/sluice.yaml": {file: repoFile("deploy", "docker", "sluice.yaml"), mode: 0o644},
	}
}

// imageSizeMax bounds the image's compressed layers: a static binary, the
// CA bundle and the default config (docs/deploy.md gives the size
// measured).
const imageSizeMax = 20 << 20

// TestImage builds the Dockerfile's final stage without Docker: each COPY
// a layer (from the same sources the build stage makes), the config from
// the stage's instructions, written as an OCI image layout with
// go-containerregistry and read back. It checks the config (non-root user,
// entrypoint `sluice serve`, the exposed port is where the default config
// listens, the health check is the binary's own), then extracts the layers
// into an empty root and runs the entrypoint there, as the image's user,
// with the image's environment: the health check must pass, /readyz must
// answer 200 with the SQLite store in the volume, and SIGTERM must stop it
// cleanly. Its compressed layers stay within imageSizeMax.
func TestImage(t *testing.T) {
	t.Parallel()
	stages, err := parseDockerfile(repoFile("Dockerfile"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(stages), 2, "a build stage and the final stage")
	final := stages[len(stages)-1]
	require.Equal(t, "scratch", final.From, "the final stage is FROM scratch: the test assembles every layer of it")
	checkBuildStage(t, stages)

	cfg, copies, err := imageFromStage(final)
	require.NoError(t, err)
	sources := imageSources(t)
	var binary string // the sluice binary's path in the image
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, c := range copies {
		src, ok := sources[c.From+":"+c.Src]
		require.True(t, ok, "%s: the image test does not know COPY source %s:%s (add it to imageSources)", c.Instr, c.From, c.Src)
		if c.From != "" {
			requireStageMakes(t, stages, c.From, c.Src)
		}
		if c.Src == "/out/sluice" {
			binary = c.Dest
		}
		layerTar := copyLayer(t, c, src)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(layerTar)), nil
		}, tarball.WithMediaType(types.OCILayer))
		require.NoError(t, err)
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			History: v1.History{CreatedBy: c.Instr.Cmd + " " + c.Instr.Args}})
		require.NoError(t, err)
	}
	require.NotEmpty(t, binary, "the final stage copies the binary built by deploy/build.sh (/out/sluice)")
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, cfg
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)

	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	require.NoError(t, err)
	require.NoError(t, lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "sluice:" + testVersion})))

	// Everything below reads the image back from the layout.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	img, err = idx.Image(im.Manifests[0].Digest)
	require.NoError(t, err)
	got, err := img.ConfigFile()
	require.NoError(t, err)
	c := got.Config
	layers, err := img.Layers()
	require.NoError(t, err)
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		require.NoError(t, err)
		size += n
	}
	t.Logf("image %s: %d layers, %.1f MiB compressed", im.Manifests[0].Digest, len(layers), float64(size)/(1<<20))
	require.LessOrEqual(t, size, int64(imageSizeMax), "the image stays small: %.1f MiB compressed, over %d MiB",
		float64(size)/(1<<20), imageSizeMax>>20)

	// The config.
	uid, gid, err := parseUser(c.User)
	require.NoError(t, err, "USER")
	require.NotZero(t, uid, "the image runs as a non-root user")
	require.NotZero(t, gid, "the image runs as a non-root group")
	require.Equal(t, []string{binary, "serve"}, c.Entrypoint, "the entrypoint is `sluice serve`")
	require.Empty(t, c.Cmd, "no CMD: arguments given to docker run go to sluice serve")
	require.NotNil(t, c.Healthcheck)
	require.Equal(t, []string{"CMD", binary, "health"}, c.Healthcheck.Test, "the health check is the binary's own probe")
	require.Positive(t, c.Healthcheck.Interval)
	require.Positive(t, c.Healthcheck.Timeout)
	env := envMap(c.Env)
	configPath := env["SLUICE_CONFIG"]
	require.NotEmpty(t, configPath, "the image names its config in SLUICE_CONFIG, which serve and health read")
	require.Len(t, c.ExposedPorts, 1)
	require.Len(t, c.Volumes, 1)
	require.Contains(t, c.Volumes, c.WorkingDir, "the working directory is the data volume (a PostgreSQL store's spool goes there)")

	// The layers, extracted into an empty root: nothing else is there.
	root := filepath.Join(dir, "root")
	extract(t, img, root)
	require.FileExists(t, filepath.Join(root, configPath), "SLUICE_CONFIG names a file of the image")
	f, err := elf.Open(filepath.Join(root, binary))
	require.NoError(t, err)
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "the binary is static")
	require.Nil(t, f.Section(".interp"), "the binary needs no dynamic loader")
	require.NoError(t, f.Close())

	run := func(ctx context.Context, env []string, argv ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = c.WorkingDir
		cmd.Env = append(slices.Clone(c.Env), env...)
		cmd.SysProcAttr = containerAttr(t, root, uid, gid)
		return cmd
	}
	ctx := t.Context()

	// --version: the stamp of deploy/build.sh.
	out, err := run(ctx, nil, binary, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "sluice "+testVersion+" (commit "+testCommit[:12]+", "+testDate+", "+runtime.Version()+" linux/"+runtime.GOARCH+")\n", string(out))

	// The default config, as the image ships it: valid, and it listens on
	// the exposed port.
	secrets := []string{"ANTHROPIC_API_KEY=sk-ant-test", "SLUICE_KEY=ck-test"}
	out, err = run(ctx, secrets, append(slices.Clone(c.Entrypoint), "--check")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`listen ([^,]+),`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	_, port, err := net.SplitHostPort(string(m[1]))
	require.NoError(t, err)
	require.Contains(t, c.ExposedPorts, port+"/tcp", "EXPOSE is the port the default config listens on")

	// The entrypoint, on a free loopback port (SLUICE_LISTEN, which the
	// default config reads), its store in the volume.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	runEnv := append(slices.Clone(secrets), "SLUICE_LISTEN="+addr)
	var stdout, stderr syncBuffer
	serve := run(context.Background(), runEnv, c.Entrypoint...)
	serve.Stdout, serve.Stderr = &stdout, &stderr
	require.NoError(t, serve.Start())
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = serve.Process.Kill()
			t.Log("sluice serve killed:", <-exited)
		}
	}()

	// The HEALTHCHECK, run as Docker would: in the container, its exit
	// status the verdict, within its timeout, until healthy.
	healthy := func(argv []string) bool {
		hctx, cancel := context.WithTimeout(ctx, c.Healthcheck.Timeout)
		defer cancel()
		return run(hctx, runEnv, argv...).Run() == nil
	}
	require.Eventually(t, func() bool { return healthy(c.Healthcheck.Test[1:]) }, 30*time.Second, 100*time.Millisecond,
		"the health check never passed:\n%s\n%s", stdout.String(), stderr.String())
	require.True(t, healthy([]string{binary, "health", "--ready"}), "/readyz: the store in the volume answers")
	require.Contains(t, stdout.String(), "store: sqlite:"+c.WorkingDir+"/sluice.db")

	// The client key from the environment guards the API.
	status := func(key string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, status(""))
	require.Equal(t, http.StatusOK, status("ck-test"))

	// SIGTERM (the image's STOPSIGNAL): a clean exit well within the grace.
	require.Equal(t, "SIGTERM", c.StopSignal)
	require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "exit status after SIGTERM\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice serve did not exit within 30s of SIGTERM\n%s", stderr.String())
	}
	require.Contains(t, stdout.String(), "shutting down")
	st, err := os.Stat(filepath.Join(root, c.WorkingDir, "sluice.db"))
	require.NoError(t, err, "the SQLite store is in the volume")
	if os.Geteuid() == 0 {
		require.Equal(t, uint32(uid), st.Sys().(*syscall.Stat_t).Uid, "the store belongs to the image's user")
	}
}

// checkBuildStage: the Dockerfile builds with the Go release go.mod names.
func checkBuildStage(t *testing.T, stages []dockerStage) {
	t.Helper()
	gomod, err := os.ReadFile(repoFile("go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, m)
	df, err := os.ReadFile(repoFile("Dockerfile"))
	require.NoError(t, err)
	require.Contains(t, string(df), "ARG GO_VERSION="+string(m[1])+"\n", "the build stage's Go is go.mod's")
	require.Contains(t, stages[0].From, "golang:${GO_VERSION}")
}

// requireStageMakes: the stage named name writes path (a RUN line names it).
func requireStageMakes(t *testing.T, stages []dockerStage, name, p string) {
	t.Helper()
	for _, st := range stages {
		if st.Name != name {
			continue
		}
		if p == "/etc/ssl/certs/ca-certificates.crt" {
			require.Contains(t, st.From, "golang:", "the CA bundle comes with the golang image")
			return
		}
		for _, in := range st.Instrs {
			if in.Cmd == "RUN" && strings.Contains(in.Args, " "+p) {
				if p == "/out/sluice" {
					require.Contains(t, in.Args, "deploy/build.sh "+p, "the image's binary is built by deploy/build.sh, as in the test")
				}
				return
			}
		}
		t.Fatalf("stage %s has no RUN line that makes %s", name, p)
	}
	t.Fatalf("no stage %s", name)
}

// copyLayer is the layer a COPY adds: its parent directories (root's,
// 0755, as Docker creates them) and the file or directory, owned as
// --chown says.
func copyLayer(t *testing.T, c dockerCopy, src imageSource) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dest := strings.TrimPrefix(path.Clean(c.Dest), "/")
	parts := strings.Split(dest, "/")
	epoch := time.Unix(0, 0)
	for i := 1; i < len(parts); i++ {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i], "/") + "/", Mode: 0o755, ModTime: epoch}))
	}
	hdr := &tar.Header{Name: dest, Mode: int64(src.mode), Uid: c.UID, Gid: c.GID, ModTime: epoch}
	if src.file == "" {
		hdr.Typeflag, hdr.Name = tar.TypeDir, dest+"/"
		require.NoError(t, tw.WriteHeader(hdr))
	} else {
		data, err := os.ReadFile(src.file)
		require.NoError(t, err, "COPY source %s", src.file)
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		require.NoError(t, tw.WriteHeader(hdr))
		_, err = tw.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// extract writes the image's flattened file system under root, with the
// owners the layers give when running as root.
func extract(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		p := filepath.Join(root, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(p, 0o755))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			require.NoError(t, err)
			_, err = io.Copy(f, tr)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		default:
			t.Fatalf("unexpected entry %s (type %c) in the image", h.Name, h.Typeflag)
		}
		require.NoError(t, os.Chmod(p, fs.FileMode(h.Mode).Perm()))
		if os.Geteuid() == 0 {
			require.NoError(t, os.Lchown(p, h.Uid, h.Gid))
		}
	}
	// Extraction made the parents of root-relative paths; the root itself
	// is what / is in a container.
	require.NoError(t, os.Chmod(root, 0o755))
}

// containerAttr runs a process as a container would see the image: root
// as its /, as uid:gid. As root that is chroot and setuid; otherwise a
// user namespace maps uid:gid to the caller, which then may chroot.
func containerAttr(t *testing.T, root string, uid, gid int) *syscall.SysProcAttr {
	t.Helper()
	attr := &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true},
		Pdeathsig:  syscall.SIGKILL,
	}
	if os.Geteuid() != 0 {
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: os.Getegid(), Size: 1}}
	}
	return attr
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

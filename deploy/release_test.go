package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReleaseArchive runs deploy/release.sh for this machine's platform
// (make release builds linux and darwin on amd64 and arm64): the archive is
// named after the version, SHA256SUMS matches it, its entries are owned by
// root with the commit's time, and its binary is byte for byte the one
// deploy/build.sh makes from the same stamp (the build is reproducible).
func TestReleaseArchive(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(staticBinary(t))
	require.NoError(t, err)
	dist := t.TempDir()
	platform := "linux/" + runtime.GOARCH
	cmd := exec.CommandContext(t.Context(), "bash", "release.sh")
	cmd.Env = append(os.Environ(), "PLATFORMS="+platform, "DIST="+dist,
		"VERSION="+testVersion, "COMMIT="+testCommit, "DATE="+testDate)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	name := "sluice_" + testVersion + "_linux_" + runtime.GOARCH
	archive, err := os.ReadFile(filepath.Join(dist, name+".tar.gz"))
	require.NoError(t, err)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	require.NoError(t, err)
	sum := sha256.Sum256(archive)
	require.Equal(t, hex.EncodeToString(sum[:])+"  "+name+".tar.gz\n", string(sums))

	zr, err := gzip.NewReader(bytes.NewReader(archive))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	date, err := time.Parse(time.RFC3339, testDate)
	require.NoError(t, err)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(h.Name, name+"/"), h.Name)
		require.Zero(t, h.Uid, h.Name)
		require.True(t, h.ModTime.Equal(date), "%s: %s", h.Name, h.ModTime)
		files[strings.TrimPrefix(h.Name, name+"/")] = true
		if h.Name == name+"/sluice" {
			require.Equal(t, int64(0o755), h.Mode&0o777)
			got, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "the archive's binary is deploy/build.sh's, byte for byte")
		}
	}
	for _, f := range []string{"sluice", "README.md", "CHANGELOG.md"} {
		require.True(t, files[f], "the archive holds %s", f)
	}
}

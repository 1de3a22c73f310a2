#!/usr/bin/env bash
# Builds the release archives: sluice for linux and darwin on amd64 and
# arm64, each dist/sluice_<version>_<os>_<arch>.tar.gz (the binary, README.md
# and CHANGELOG.md), and dist/SHA256SUMS over them.
#
#   deploy/release.sh                          # every platform (make release)
#   PLATFORMS=linux/amd64 DIST=/tmp/d deploy/release.sh
#
# Archives are reproducible: the binary is stamped with the commit's time
# (deploy/build.sh) and the tar entries carry that time, owner 0 and a
# fixed order, so the same commit gives the same checksums.
set -euo pipefail
cd "$(dirname "$0")/.."
# The same defaults as deploy/build.sh, computed once for the names and
# the archives' times.
: "${VERSION:=$(git describe --tags --always --dirty)}"
: "${COMMIT:=$(git rev-parse HEAD)}"
: "${DATE:=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)}"
export VERSION COMMIT DATE
PLATFORMS="${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
DIST="${DIST:-dist}"
rm -rf "$DIST"
mkdir -p "$DIST"
for p in $PLATFORMS; do
  os="${p%/*}" arch="${p#*/}"
  name="sluice_${VERSION}_${os}_${arch}"
  echo "building $name"
  GOOS="$os" GOARCH="$arch" deploy/build.sh "$DIST/$name/sluice"
  cp README.md CHANGELOG.md "$DIST/$name/"
  tar --sort=name --mtime="$DATE" --owner=0 --group=0 --numeric-owner \
    -C "$DIST" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
  rm -rf "${DIST:?}/$name"
done
(cd "$DIST" && sha256sum -- *.tar.gz >SHA256SUMS)
cat "$DIST/SHA256SUMS"

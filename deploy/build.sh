#!/usr/bin/env bash
# Builds one static sluice binary stamped with its version, commit and date:
# the one build that the release archives (deploy/release.sh), the
# Dockerfile and the image test (deploy/image_test.go) all use.
#
#   deploy/build.sh OUT                      # for this machine
#   GOOS=darwin GOARCH=arm64 deploy/build.sh OUT
#
# VERSION, COMMIT and DATE (each one unset) default, in a git checkout, to `git describe`, the
# HEAD commit and its commit time in UTC (the commit's time, not the
# build's, so that rebuilding a commit gives the same bytes). Outside a
# checkout (a Docker build context has no .git) they stay empty and
# `sluice --version` says devel.
set -euo pipefail
out="${1:?usage: deploy/build.sh OUT}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$(dirname "$0")/.."
if git rev-parse --git-dir >/dev/null 2>&1; then
  : "${VERSION:=$(git describe --tags --always --dirty)}"
  : "${COMMIT:=$(git rev-parse HEAD)}"
  : "${DATE:=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)}"
fi
# CGO_ENABLED=0: a static binary (the SQLite driver, modernc.org/sqlite, is
# pure Go), so it runs FROM scratch. -trimpath: no build paths in it.
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X main.version=${VERSION:-} -X main.commit=${COMMIT:-} -X main.date=${DATE:-}" \
  -o "$out" ./cmd/sluice

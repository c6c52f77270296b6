#!/usr/bin/env bash
# Build kustomize from Go modules into a cache outside the checkout; print its path last.
#
#   tests/tools/build_kustomize.sh            -> .../kustomize-v5.8.2/kustomize
#
# Idempotent: a binary already in the cache that reports the pinned version is reused.
# Cache: ${HEADROOM_TOOLS_CACHE:-$HOME/.cache/headroom-tools}. Needs Go and the module proxy
# (GOPROXY as configured) on the first run only. Progress goes to stderr, the path to stdout.
set -euo pipefail

# v5.8.3 (2026-10-08) needs go >= 1.27; v5.8.2 builds with Go 1.26 (go.mod: go 1.26.0).
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.2}"
CACHE="${HEADROOM_TOOLS_CACHE:-$HOME/.cache/headroom-tools}"
BIN_DIR="$CACHE/kustomize-$KUSTOMIZE_VERSION"
BIN="$BIN_DIR/kustomize"

say() { echo "build_kustomize: $*" >&2; }

if [[ -x "$BIN" ]] && "$BIN" version 2>/dev/null | grep -q "$KUSTOMIZE_VERSION"; then
  say "cached $BIN ($("$BIN" version))"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { say "go not found on PATH"; exit 1; }
say "building sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION with $(go version)"
mkdir -p "$BIN_DIR"
tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
# -trimpath: reproducible; CGO off: a static binary; run outside any module so the
# checkout's go.mod (if one appears) never affects resolution.
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
  go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION")
mv -f "$tmp/kustomize" "$BIN"   # atomic within the same directory tree
say "built in $((SECONDS - start))s: $("$BIN" version)"
echo "$BIN"

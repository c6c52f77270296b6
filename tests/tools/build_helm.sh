#!/usr/bin/env bash
# Build helm from Go modules into a cache outside the checkout; print its path last.
#
#   tests/tools/build_helm.sh                      -> .../helm-v3.21.4/helm
#   HELM_VERSION=v4.3.2 tests/tools/build_helm.sh  -> .../helm-v4.3.2/helm
#
# Modelled on build_kustomize.sh: pinned, idempotent (a cached binary that reports the
# pinned version is reused), atomic rename into the cache. Cache:
# ${HEADROOM_TOOLS_CACHE:-$HOME/.cache/headroom-tools}. Needs Go and the module proxy
# (GOPROXY as configured) on the first run only. Progress goes to stderr, the path to stdout.
set -euo pipefail

# v3.21.4: the line the GPU charts platform teams run (NVIDIA GPU operator, HAMi,
# KAI-Scheduler) document; go.mod says go 1.26.0, so it builds with Go 1.26. The chart is
# apiVersion v2, which helm v4 renders too (the major version picks the module path below).
# Skip v3.22.0: served by the proxy but not approved here.
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
MAJOR="${HELM_VERSION%%.*}"           # v3 | v4
CACHE="${HEADROOM_TOOLS_CACHE:-$HOME/.cache/headroom-tools}"
BIN_DIR="$CACHE/helm-$HELM_VERSION"
BIN="$BIN_DIR/helm"

say() { echo "build_helm: $*" >&2; }

if [[ -x "$BIN" ]] && "$BIN" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
  say "cached $BIN ($("$BIN" version --short))"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { say "go not found on PATH"; exit 1; }
say "building helm.sh/helm/$MAJOR/cmd/helm@$HELM_VERSION with $(go version)"
mkdir -p "$BIN_DIR"
tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
# helm's Makefile stamps what `go install` cannot know; do the same so this binary
# behaves like a release build: its version, and (v3 only; v4 reads it from the build
# info) the Kubernetes version `helm template` and `helm lint` assume, which is the
# k8s.io/client-go minor version in helm's go.mod (v0.36.2 -> 1.36).
gomod="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/$MAJOR@$HELM_VERSION" \
  | sed -n 's/.*"GoMod": "\(.*\)",*$/\1/p')"
k8s_minor="$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]}' "$gomod")"
[[ -n "$k8s_minor" ]] || { say "no k8s.io/client-go in $gomod"; exit 1; }
ldflags="-s -w -X helm.sh/helm/$MAJOR/internal/version.version=$HELM_VERSION"
if [[ "$MAJOR" == v3 ]]; then
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
  done
fi
# -mod=mod: resolve from the module's own go.mod, never a vendor dir; -trimpath:
# reproducible; CGO off: a static binary; run outside any module so the checkout's
# go.mod (if one appears) never affects resolution.
(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath" \
  go install -ldflags "$ldflags" "helm.sh/helm/$MAJOR/cmd/helm@$HELM_VERSION")
mv -f "$tmp/helm" "$BIN"   # atomic within the same directory tree
say "built in $((SECONDS - start))s: $("$BIN" version --short)"
echo "$BIN"

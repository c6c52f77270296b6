#!/usr/bin/env bash
# Build the kubelet device-manager harness (tests/e2e/kubeletdm) used by the device plugin e2e.
#
# Cached like build.sh, outside the checkout:
#   ${HEADROOM_E2E_CACHE:-$HOME/.cache/headroom-e2e}/<key>/bin/kubeletdm
# where <key> encodes the Kubernetes and Go versions plus a short hash of the harness's
# go.mod, go.sum and Go files, so any change there rebuilds. Same k8s.io/kubernetes pin and
# replace directives as tests/e2e/k8s/go.mod (the control plane). Idempotent; progress on
# stderr; the last line on stdout is the binary's path.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HERE/kubeletdm"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0

log() { printf '[build_kubeletdm.sh] %s\n' "$*" >&2; }
command -v go >/dev/null || { log "go not found on PATH"; exit 2; }

GO_VERSION="$(go env GOVERSION)"
K8S_VERSION="$(cd "$MOD" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes)"
FILES_HASH="$(cat "$MOD/go.mod" "$MOD/go.sum" "$MOD"/*.go | sha256sum | cut -c1-10)"
KEY="kubeletdm-${K8S_VERSION}_${GO_VERSION}_$(go env GOOS)-$(go env GOARCH)_${FILES_HASH}"
CACHE="${HEADROOM_E2E_CACHE:-$HOME/.cache/headroom-e2e}"
BIN="$CACHE/$KEY/bin"

if [[ -x "$BIN/kubeletdm" ]]; then
    log "cached: $BIN/kubeletdm"
    echo "$BIN/kubeletdm"
    exit 0
fi
mkdir -p "$BIN"
exec 9>"$CACHE/$KEY/.lock"
flock 9
if [[ ! -x "$BIN/kubeletdm" ]]; then
    start=$SECONDS
    log "building kubeletdm against k8s.io/kubernetes $K8S_VERSION ($GO_VERSION) ..."
    (cd "$MOD" && go build -trimpath -ldflags="-s -w" -o "$BIN/.kubeletdm.tmp" .)
    mv -f "$BIN/.kubeletdm.tmp" "$BIN/kubeletdm"
    log "done in $((SECONDS - start))s"
fi
echo "$BIN/kubeletdm"

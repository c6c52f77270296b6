#!/usr/bin/env bash
# Build the real etcd, kube-apiserver and kube-scheduler used by the e2e tests.
#
# Binaries go to a cache outside the checkout:
#   ${HEADROOM_E2E_CACHE:-$HOME/.cache/headroom-e2e}/<key>/bin/
# where <key> encodes the Kubernetes, etcd and Go versions plus a short hash of the
# module files (go.mod, go.sum, etcd main.go), so any change there rebuilds.
# Idempotent: if all three binaries exist for the key, it exits at once.
# Progress goes to stderr; the last line on stdout is the bin directory.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_MOD="$HERE/k8s"
ETCD_MOD="$HERE/etcd"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"   # never switch toolchains behind our back
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0                         # static, like the release server binaries

log() { printf '[build.sh] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found on PATH"; exit 2; }

mod_version() {  # mod_version <dir> <module>
    (cd "$1" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2")
}

GO_VERSION="$(go env GOVERSION)"
K8S_VERSION="$(mod_version "$K8S_MOD" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$ETCD_MOD" go.etcd.io/etcd/server/v3)"
FILES_HASH="$(cat "$K8S_MOD/go.mod" "$K8S_MOD/go.sum" "$K8S_MOD/tools.go" \
    "$ETCD_MOD/go.mod" "$ETCD_MOD/go.sum" "$ETCD_MOD/main.go" | sha256sum | cut -c1-10)"
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_${GO_VERSION}_$(go env GOOS)-$(go env GOARCH)_${FILES_HASH}"
CACHE="${HEADROOM_E2E_CACHE:-$HOME/.cache/headroom-e2e}"
BIN="$CACHE/$KEY/bin"

have_all() {
    [[ -x "$BIN/etcd" && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" ]]
}

if have_all; then
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

mkdir -p "$BIN"
# One build at a time per key (parallel pytest sessions, several shells).
exec 9>"$CACHE/$KEY/.lock"
flock 9
if have_all; then
    log "cached (built by another process): $BIN"
    echo "$BIN"
    exit 0
fi

MAJOR_MINOR="${K8S_VERSION#v}"
K8S_MAJOR="${MAJOR_MINOR%%.*}"
K8S_MINOR="$(echo "$MAJOR_MINOR" | cut -d. -f2)"
BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
# Same version stamping as kubernetes' hack/lib/version.sh, so /version says v1.37.x.
K8S_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR"
    K8S_LDFLAGS+=" -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean"
    K8S_LDFLAGS+=" -X $pkg.buildDate=$BUILD_DATE"
done

build() {  # build <name> <module dir> <package> <ldflags>
    local name="$1" dir="$2" pkg="$3" ldflags="$4"
    if [[ -x "$BIN/$name" ]]; then
        log "$name: already built"
        return
    fi
    local start=$SECONDS
    log "$name: building $pkg ($GO_VERSION) ..."
    (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$BIN/.$name.tmp" "$pkg")
    mv -f "$BIN/.$name.tmp" "$BIN/$name"   # atomic: a half-written binary never counts
    log "$name: done in $((SECONDS - start))s"
}

TOTAL_START=$SECONDS
log "key: $KEY"
build etcd "$ETCD_MOD" . "-s -w"
build kube-apiserver "$K8S_MOD" k8s.io/kubernetes/cmd/kube-apiserver "$K8S_LDFLAGS"
build kube-scheduler "$K8S_MOD" k8s.io/kubernetes/cmd/kube-scheduler "$K8S_LDFLAGS"
log "all built in $((SECONDS - TOTAL_START))s"
echo "$BIN"

#!/usr/bin/env bash
# Regenerate the stubs of the two kubelet gRPC APIs the node side speaks:
#   the device plugin API v1beta1  -> drivers/deviceplugin/api/   (headroom device-plugin)
#   the pod-resources API v1       -> drivers/podresources/api/   (the agent's truth loop)
#
# Why checked in: the plugin must import on a node image without protoc or Go, and the
# generated code is tied to the grpcio/protobuf versions in pyproject.toml (the stubs
# refuse an older runtime), so regenerate them when those floors move.
#
# Source of truth: k8s.io/kubelet's pkg/apis/{deviceplugin/v1beta1,podresources/v1}/api.proto
# at the version
# the e2e harness pins (tests/e2e/kubeletdm/go.mod, k8s.io/kubelet), fetched with
# `go mod download` through the Go module proxy. Since k8s.io/kubelet v0.34 the file no
# longer imports gogo protobuf; any `gogoproto` import or option that an older version
# carries is stripped here, because grpcio-tools cannot resolve it and the options only
# shape Go code.
#
# Needs: go, and grpcio-tools in the Python environment (`pip install -e .[test]`).
# Usage (from anywhere): tests/tools/gen_deviceplugin_api.sh [python]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${1:-python}"
MOD_DIR="$ROOT/tests/e2e/kubeletdm"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
VERSION="$(cd "$MOD_DIR" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubelet)"
DIR="$(cd "$MOD_DIR" && go mod download -json "k8s.io/kubelet@$VERSION" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
# gen SRC_REL OUT_REL: copy one proto (gogoproto stripped) and compile it in place
gen() {
    local src="$DIR/$1" out_rel="$2"
    {
        echo "// Copied from k8s.io/kubelet@$VERSION $1"
        echo "// by tests/tools/gen_deviceplugin_api.sh; gogoproto imports/options stripped (none at v0.34+)."
        grep -v 'gogoproto' "$src" | sed -E 's/ *\[\(gogoproto\.[^]]*\]//g'
    } > "$ROOT/$out_rel/api.proto"
    (cd "$ROOT" && "$PY" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. "$out_rel/api.proto")
    echo "generated $out_rel/api_pb2.py, api_pb2.pyi, api_pb2_grpc.py from k8s.io/kubelet@$VERSION" >&2
}

gen pkg/apis/deviceplugin/v1beta1/api.proto drivers/deviceplugin/api
gen pkg/apis/podresources/v1/api.proto drivers/podresources/api

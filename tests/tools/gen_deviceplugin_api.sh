#!/usr/bin/env bash
# Regenerate the kubelet device plugin API stubs under drivers/deviceplugin/api/.
#
# Why checked in: the plugin must import on a node image without protoc or Go, and the
# generated code is tied to the grpcio/protobuf versions in pyproject.toml (the stubs
# refuse an older runtime), so regenerate them when those floors move.
#
# Source of truth: k8s.io/kubelet's pkg/apis/deviceplugin/v1beta1/api.proto at the version
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
OUT_REL="drivers/deviceplugin/api"

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
VERSION="$(cd "$MOD_DIR" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubelet)"
DIR="$(cd "$MOD_DIR" && go mod download -json "k8s.io/kubelet@$VERSION" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
SRC="$DIR/pkg/apis/deviceplugin/v1beta1/api.proto"

{
    echo "// Copied from k8s.io/kubelet@$VERSION pkg/apis/deviceplugin/v1beta1/api.proto"
    echo "// by tests/tools/gen_deviceplugin_api.sh; gogoproto imports/options stripped (none at v0.34+)."
    grep -v 'gogoproto' "$SRC" | sed -E 's/ *\[\(gogoproto\.[^]]*\]//g'
} > "$ROOT/$OUT_REL/api.proto"

cd "$ROOT"
"$PY" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. "$OUT_REL/api.proto"
echo "generated $OUT_REL/api_pb2.py, api_pb2.pyi, api_pb2_grpc.py from k8s.io/kubelet@$VERSION" >&2

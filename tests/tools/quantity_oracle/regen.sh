#!/usr/bin/env bash
# Regenerates tests/fixtures/k8s_quantities.json: what Kubernetes' own
# resource.ParseQuantity (k8s.io/apimachinery, the version in go.mod) says of each
# string inputs.py lists. Needs Go and the Go module proxy; run from anywhere.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
bin="$(mktemp -d)/quantity_oracle"
(cd "$here" && go build -o "$bin" .)
python3 "$here/inputs.py" | "$bin" > "$root/tests/fixtures/k8s_quantities.json"
echo "wrote tests/fixtures/k8s_quantities.json"

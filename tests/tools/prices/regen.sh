#!/usr/bin/env bash
# Regenerates extender/data/prices.json (docs/pricing.md): on-demand prices from
# aws/karpenter-provider-aws's generated table (a Go module, fetched with `go mod download`)
# and GPU specs from moto's bundled DescribeInstanceTypes data (wheels fetched with
# `pip download`). Needs Go, pip and the two registries; run from anywhere.
#
#   tests/tools/prices/regen.sh                      # the pinned versions below
#   OFFER_CSV=index.csv tests/tools/prices/regen.sh  # prices from AWS's bulk offer CSV instead
set -euo pipefail
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.15.2}"
# moto 5.2.6: current DescribeInstanceTypes; 5.0.0 (2024-01) still lists p3, which AWS
# prices but the newer dump dropped. The first wheel that has a type wins.
MOTO_VERSIONS="${MOTO_VERSIONS:-5.2.6 5.0.0}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

wheels=()
for v in $MOTO_VERSIONS; do
  pip download --quiet --no-deps --only-binary=:all: "moto==$v" -d "$tmp/moto-$v" >&2
  wheels+=(--moto-wheel "$(ls "$tmp/moto-$v"/moto-*.whl)")
done

if [[ -n "${OFFER_CSV:-}" ]]; then
  src=(--offer-csv "$OFFER_CSV")
else
  # The module's go directive may be newer than the local toolchain: `go mod download`
  # then reports an error but has fetched and checksum-verified the zip, which is all
  # that is read here (one generated Go file, as text).
  info="$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json \
    "github.com/aws/karpenter-provider-aws@$KARPENTER_VERSION" || true)"
  zip="$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("Zip",""))' <<<"$info")"
  [[ -f "$zip" ]] || { echo "regen.sh: go mod download gave no zip: $info" >&2; exit 1; }
  src=(--karpenter-zip "$zip" --karpenter-version "$KARPENTER_VERSION")
fi

python3 "$here/gen_prices.py" "${src[@]}" "${wheels[@]}" > "$tmp/prices.json"
mv "$tmp/prices.json" "$root/extender/data/prices.json"
echo "wrote extender/data/prices.json" >&2

#!/usr/bin/env bash
# NVML smoke check for a machine with an NVIDIA GPU and driver (none was available when
# the NVML driver was written; see docs/nvml-gpu.md). Run from the repository root:
#
#   bash tests/drivers/nvml_smoke.sh            # uses .venv/bin/python if present
#   PYTHON=python3 bash tests/drivers/nvml_smoke.sh
#
# It checks, in order:
#   1. the NVML driver unit tests (fake NVML; must pass anywhere);
#   2. `headroom agent --driver nvml --once` against the real driver: one JSON report,
#      every GPU healthy, UUIDs "GPU-...", memory totals > 0, v2 memory info (reserved
#      split out of used) where the driver has it;
#   3. processes: any compute process running on the GPUs (start one yourself to see
#      attribution) is listed with its host PID, memory and pod (or why it is unmapped).
# Exit status is non-zero on the first failure; the report is kept in $OUT (or /tmp).
set -euo pipefail

cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
OUT="${OUT:-/tmp}"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"

echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,mig.mode.current \
  --format=csv || echo "(nvidia-smi not available; continuing with NVML only)"

echo "== NVML driver unit tests"
"$PYTHON" -m pytest tests/drivers/test_nvml_driver.py -q -p no:cacheprovider

echo "== headroom agent --driver nvml --once"
# `headroom agent ...` once the CLI is wired in extender/cli.py; same code path:
"$PYTHON" -m extender.cli agent --driver nvml --node "${NODE_NAME:-$(hostname)}" --once \
  >"$OUT/nvml-report.json"
cat "$OUT/nvml-report.json"

echo "== checking the report"
"$PYTHON" - "$OUT/nvml-report.json" <<'EOF'
import sys

from extender.wire.report import report_decoder

report = report_decoder.decode(open(sys.argv[1], "rb").read())
assert report.driver == "nvml", report.driver
assert report.gpus, "no GPUs in the report"
for g in report.gpus:
    print(
        f"GPU {g.index} {g.uuid} {g.model}: total {g.memory_total_mib} MiB, "
        f"used {g.memory_used_mib}, reserved {g.memory_reserved_mib}, util {g.utilization_gpu}, "
        f"mig {g.mig_enabled} ({len(g.mig)} instances), {len(g.processes)} processes, "
        f"healthy {g.healthy} {g.health_reason or ''}"
    )
    assert g.healthy, f"GPU {g.index} unhealthy: {g.health_reason}"
    assert g.uuid.startswith("GPU-"), g.uuid
    assert g.memory_total_mib > 0
    assert g.memory_used_mib <= g.memory_total_mib
    for p in g.processes + [p for m in g.mig for p in m.processes]:
        print(f"  pid {p.pid}: {p.used_mib} MiB, pod {p.pod_uid} ({p.unmapped_reason})")
print(f"OK: {len(report.gpus)} GPU(s), driver {report.driver_version}")
EOF

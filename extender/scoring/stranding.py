"""GPU memory stranded behind a node's CPU or host memory, at the workload's own ratio.

A node's free GPU memory is worth something only to pods that also find CPU and host
memory there. Per pod, the workload mix (``Context.mix``, shares p_m) asks on average
    g(n) = sum_m p_m * count_m * unit_m(n)   MiB of this node's GPUs (a whole GPU: the
                                             node's largest; a slice: its memory, capped)
    c    = sum_m p_m * cpu_m                 milli-CPU
    h    = sum_m p_m * host_memory_m         MiB of host memory
so the node's free CPU C serves C * g(n) / c of its free GPU memory G, its free host memory
M serves M * g(n) / h, and the rest cannot be reached by the workload:
    S(n) = max(0, G - min(C * g(n) / c, M * g(n) / h))   (MiB; a resource the node does
                                                          not report, or the mix does not
                                                          ask, sets no bound)
The ``headroom`` policy adds -(S after - S before) / GiB to F's delta, in the same unit: a
GiB stranded counts as a GiB fragmented (``policies/headroom.py``, ``hostonly.py``).

Why beside F: F (``fragmentation.py``) counts a GPU fragmented for a shape only once the
node cannot run one more pod of it. S sees it coming: a node with four idle GPUs and CPU
for two more pods of the mix has two GPUs stranded while every shape still fits, so a
CPU-hungry pod is sent where CPU is to spare and a CPU-light one where it is short.
Why not the fill imbalance |CPU fill - GPU fill| used before: it also ranks nodes whose
GPUs are in no danger (CPU to spare at any fill), and so overrode the cost blend and the
packing tie-break there (docs/scheduling.md: the synthetic cluster lost 1.4 points of
allocation and a third more $ per GiB-hour to it). S is 0 wherever CPU and memory keep up
with the GPUs, and there the cost and the tie-break decide as before.

Computed in ``kernel.c`` (with F, in the same pass over the nodes); sums over the mix run
in mix order in plain floats, so the per-node oracle (``tests/fragmentation_reference.py``)
gets the same bits.
"""

from __future__ import annotations

import functools

import numpy as np

from extender.scoring import kernel  # compiled from kernel.c when the package is built
from extender.scoring.batch import WHOLE, Floats, GpuBatch, Ints, contiguous
from extender.scoring.model import GpuDemand, Limits, NodeView, Shape, ShapeLike

MixKey = tuple[tuple[ShapeLike, float], ...]


@functools.lru_cache(maxsize=16)  # the mix changes rarely; its arrays are never written
def per_pod_args(mix: MixKey) -> tuple:
    """The mix's mean pod as the kernel's ``PerPod`` (``args.h``): its GPU asks (one per
    plain shape: share, GPU count, MiB per GPU or WHOLE; summed per node there, as
    ``g(n)`` needs the node's GPU size) and its mean CPU and host memory. MIG shapes ask
    fixed partitions, not memory, and are left out."""
    shapes = [(Shape(*shape), share) for shape, share in mix]
    plain = [(s, share) for s, share in shapes if not s.mig_profile]
    cpu = host = 0.0
    for s, share in plain:
        cpu += share * s.cpu_milli
        host += share * s.host_memory_mib
    return (
        len(plain),
        np.array([share for _, share in plain], dtype=np.float64),
        np.array([s.gpus for s, _ in plain], dtype=np.int64),
        np.array([WHOLE if s.memory_mib is None else s.memory_mib for s, _ in plain], np.int64),
        cpu,
        host,
    )


def stranding_delta(
    b: GpuBatch, rows: Ints, mix: MixKey, pod_asks: GpuDemand, gpu_added: Floats
) -> Floats:
    """(S after - S before) / GiB of each row of ``rows`` once a pod is placed there that
    takes ``pod_asks``' CPU and host memory and ``gpu_added`` MiB of the row's GPUs."""
    at = contiguous(rows.astype(np.int64, copy=False))
    out = np.empty(len(at))
    host = (int(pod_asks.cpu_milli), int(pod_asks.host_memory_mib))
    added = contiguous(gpu_added.astype(np.float64, copy=False))
    kernel.stranding(*b.size(), b.kernel_args(), at, host, per_pod_args(mix), added, out)
    return out


def node_stranding_delta(
    node: NodeView, demand: GpuDemand, gpu_added: int, lim: Limits, mix: MixKey
) -> float:
    """``stranding_delta`` of one node (bind, preemption): the same code on a one-node batch."""
    b = GpuBatch.from_views([node], lim)
    at = np.zeros(1, dtype=np.int64)
    added = np.array([float(gpu_added)])
    return float(stranding_delta(b, at, mix, demand, added)[0])

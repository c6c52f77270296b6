"""FGD's fragmentation measure F and its greedy placement in plain Python, one node at a
time: the oracle ``extender.scoring.fragmentation`` (the one definition) is tested against.

Written for reading, not speed: every trial placement recomputes F from scratch.
    F(n)   = sum_m p_m * F_m(n)   (added in mix order)
    F_m(n) = 0 if the node's GPU model is not one m allows (outside m's measure); all
             free memory if the node's free CPU or host memory is less than m asks; else
             free memory on GPUs that cannot host one unit of m, if at least count_m can;
             else all free memory. Whole-GPU
             shapes are hosted by idle GPUs; MIG shapes: 0. F after a placement sees the
             node's CPU and memory as the pod leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.scoring.fit import unit_mib
from extender.scoring.model import GpuDemand, GpuView, Limits, NodeView, ShapeLike
from extender.scoring.policy import (
    Context,
    Shape,
    chosen_fill_after,
    node_fill_after,
)

State = list[tuple[int, bool]]  # per plain GPU: (free MiB >= 0, idle)
Mix = Sequence[tuple[ShapeLike, float]]
Host = tuple[int | None, int | None, str]  # free CPU milli, free memory MiB (None: unknown), model
ANY_HOST: Host = (None, None, "")


def host_of(node: NodeView, pod: GpuDemand | None = None) -> Host:
    """The node's free CPU and memory (after ``pod``, when given) and its GPU model."""
    cpu = node.cpu_allocatable_milli - node.cpu_requested_milli
    mem = node.memory_allocatable_mib - node.memory_requested_mib
    if pod is not None:
        cpu, mem = cpu - pod.cpu_milli, mem - pod.host_memory_mib
    return (
        cpu if node.cpu_allocatable_milli else None,
        mem if node.memory_allocatable_mib else None,
        node.model,
    )


def can_run(shape: ShapeLike, host: Host) -> bool:
    s = Shape(*shape)
    cpu, mem, _ = host
    if cpu is not None and cpu < s.cpu_milli:
        return False
    return mem is None or mem >= s.host_memory_mib


def allowed(shape: ShapeLike, host: Host) -> bool:
    """Whether the node's GPU model is one the shape may use."""
    s = Shape(*shape)
    return not s.models or host[2] in s.models


def task_fragment(state: State, shape: ShapeLike, host: Host = ANY_HOST) -> int:
    """F_m(n) for one shape, in MiB."""
    count, mem, profile = Shape(*shape)[:3]
    if profile:
        return 0  # MIG instances are fixed partitions, outside this measure
    if not allowed(shape, host):
        return 0
    total = sum(f for f, _ in state)
    if not can_run(shape, host):
        return total
    if mem is None:
        if sum(1 for _, idle in state if idle) >= count:
            return sum(f for f, idle in state if not idle)
        return total
    if sum(1 for f, _ in state if f >= mem) >= count:
        return sum(f for f, _ in state if f < mem)
    return total


def fragmentation(state: State, mix: Mix, host: Host = ANY_HOST) -> float:
    """F(n) in MiB."""
    return sum(p * task_fragment(state, shape, host) for shape, p in mix)


def node_state(node: NodeView, lim: Limits) -> tuple[State, list[GpuView]]:
    """The node's plain GPUs as (free, idle), and the GPUs, in index order."""
    plain = sorted((g for g in node.gpus if not g.mig_profile), key=lambda g: g.index)
    return [(max(g.free_mib(lim.margin_mib), 0), g.idle(lim.idle_mib)) for g in plain], plain


def taken(state: State, i: int, gpu: GpuView, demand: GpuDemand, lim: Limits) -> State:
    """The state once one unit of the demand sits on GPU i (which is then busy)."""
    out = list(state)
    out[i] = (max(state[i][0] - unit_mib(gpu, demand, lim), 0), False)
    return out


def greedy_place(
    node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context, by_free: bool
) -> tuple[GpuView, ...]:
    """Per unit, the fitting GPU whose placement leaves the least F; ties to the least
    headroom when ``by_free`` (the headroom policy), then to the lowest index."""
    state, plain = node_state(node, ctx.limits)
    slot = {g.uuid: i for i, g in enumerate(plain)}
    left, chosen = list(fitting), []
    after = host_of(node, demand)
    for _ in range(demand.count):

        def key(g: GpuView, state: State = state) -> tuple[float, int, int]:
            f = fragmentation(taken(state, slot[g.uuid], g, demand, ctx.limits), ctx.mix, after)
            return (f, g.free_mib(ctx.limits.margin_mib) if by_free else 0, g.index)

        best = min(left, key=key)
        state = taken(state, slot[best.uuid], best, demand, ctx.limits)
        left.remove(best)
        chosen.append(best)
    return tuple(chosen)


def delta(node: NodeView, demand: GpuDemand, chosen: Sequence[GpuView], ctx: Context) -> float:
    """F after one unit on each chosen GPU - F before, in MiB."""
    state, plain = node_state(node, ctx.limits)
    slot = {g.uuid: i for i, g in enumerate(plain)}
    before = fragmentation(state, ctx.mix, host_of(node))
    for g in chosen:
        state = taken(state, slot[g.uuid], g, demand, ctx.limits)
    return fragmentation(state, ctx.mix, host_of(node, demand)) - before


TIE = 1 / 64  # the headroom policy's tie weight (``policies.headroom.TIE``)
STRANDING = 1.0  # and its stranding weight (``policies.headroom.STRANDING``)


def raw(
    policy: str, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
) -> tuple[tuple[GpuView, ...], float]:
    """(chosen GPUs, raw score) of ``fgd`` or ``headroom`` for a plain demand that fits."""
    chosen = greedy_place(node, demand, fitting, ctx, by_free=policy == "headroom")
    score = -delta(node, demand, chosen, ctx) / 1024
    if policy == "headroom":
        lim = ctx.limits
        gpu_fill = node_fill_after(node, demand, chosen, lim)
        fill = 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * gpu_fill
        added = sum(unit_mib(g, demand, lim) for g in chosen)
        strand = stranding_delta(node, demand, float(added), ctx.mix)
        score = score - STRANDING * strand + TIE * fill
    return chosen, score


def stranding_delta(node: NodeView, pod: GpuDemand, added: float, mix: Mix) -> float:
    """(S after - S before) / GiB: S is the node's free GPU memory that its free CPU or host
    memory cannot serve at the mix's mean CPU and memory per pod (``scoring.stranding``)."""
    plain = [(Shape(*shape), p) for shape, p in mix]
    plain = [(s, p) for s, p in plain if not s.mig_profile]
    if not plain:
        return 0.0
    gpu_mib = float(max((g.total_mib for g in node.gpus if not g.mig_profile), default=0))
    per_pod = 0.0
    for s, p in plain:
        unit = gpu_mib if s.memory_mib is None else min(float(s.memory_mib), gpu_mib)
        per_pod = per_pod + p * (s.gpus * unit)
    cpu = mem = 0.0
    for s, p in plain:
        cpu += p * s.cpu_milli
        mem += p * s.host_memory_mib
    host = host_of(node)
    free = float(max(0, node.total_mib - node.committed_mib))

    def stranded(gpu_free: float, cpu_free: int | None, mem_free: int | None) -> float:
        reach = float("inf")
        for asked, left in ((cpu, cpu_free), (mem, mem_free)):
            if asked > 0 and left is not None:
                reach = min(reach, (max(left, 0) * per_pod) / asked)
        return max(0.0, gpu_free - reach)

    before = stranded(free, host[0], host[1])
    after_host = host_of(node, pod)
    after = stranded(max(0.0, free - added), after_host[0], after_host[1])
    return (after - before) / 1024

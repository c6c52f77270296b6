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
    host_fill_after,
    imbalance_after,
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
BALANCE = 1.0  # and its balance weight (``policies.headroom.BALANCE``)


def raw(
    policy: str, node: NodeView, demand: GpuDemand, fitting: Sequence[GpuView], ctx: Context
) -> tuple[tuple[GpuView, ...], float]:
    """(chosen GPUs, raw score) of ``fgd`` or ``headroom`` for a plain demand that fits."""
    chosen = greedy_place(node, demand, fitting, ctx, by_free=policy == "headroom")
    score = -delta(node, demand, chosen, ctx) / 1024
    if policy == "headroom":
        lim = ctx.limits
        gpu_fill = node_fill_after(node, demand, chosen, lim)
        fill = 0.5 * chosen_fill_after(demand, chosen, lim) + 0.5 * host_fill_after(
            node, demand, gpu_fill
        )
        score = score - BALANCE * imbalance_after(node, demand, gpu_fill) + TIE * fill
    return chosen, score

"""What kubelet says each granted pod on a node holds, and where that is not the grant. Pure.

The agent reports kubelet's pod-resources answer raw (``NodeReport.received``: device
plugin ids and DRA devices per pod and container); here the ids become GPUs and the
pods become ledger pods:

- a device plugin id names a GPU by its UUID, with or without a ``::<n>`` suffix:
  headroom's slots ``<UUID>::<k>``, the stock NVIDIA plugin's time-slicing replicas
  ``<UUID>::<n>``, plain ``<UUID>`` (or a MIG device's UUID), and the stock plugin's
  ``deviceIDStrategy: index`` ids (``"0"``); an id naming no GPU of the report (another
  resource: a NIC, an FPGA) is not a GPU and is ignored;
- a pod is matched by namespace and name (pod-resources carries no UID) to the grants
  the inventory holds on this node; a pod with no grant here is not judged (the agent's
  leak findings cover its processes).

A ``mismatch`` names both sides: the GPU granted and the GPU received (or that none was),
or a GPU held that no grant names. Pods that hold no device plugin GPU (not admitted
yet, or DRA pods, whose allocation the ledger ingests from the claim) are not judged.
"""

from __future__ import annotations

from collections import defaultdict

from extender.core.allocation import EventKind
from extender.core.received import Held, pair, unpaired
from extender.scheduling.discrepancies import Discrepancy
from extender.state.inventory import Grant
from extender.wire.report import NodeReport, PodReceived


def known_ids(report: NodeReport) -> dict[str, str]:
    """Every way a device plugin id may name one of the report's GPUs -> its UUID."""
    out: dict[str, str] = {}
    for g in report.gpus:
        out[str(g.index)] = g.uuid
        out[g.uuid] = g.uuid
        for m in g.mig:
            out[m.uuid] = m.uuid
    return out


def gpu_of(device_id: str, known: dict[str, str]) -> str | None:
    """The GPU (or MIG) UUID a device plugin id names, or None when it names none."""
    return known.get(device_id.split("::", 1)[0])


def held(report: NodeReport, grants: list[Grant]) -> list[Held]:
    """What each granted pod on the node holds, per kubelet; [] when not reported."""
    if not report.received:
        return []
    uids = {(g.namespace, g.name): g.pod_uid for g in grants}
    known = known_ids(report)
    out = []
    for pod in report.received:
        uid = uids.get((pod.namespace, pod.name))
        if uid is not None:
            out.append(_held(uid, report.node, pod, known))
    return out


def _held(uid: str, node: str, pod: PodReceived, known: dict[str, str]) -> Held:
    devices: dict[str, str] = {}  # an init container's devices come back for the app's
    claims: dict[str, None] = {}
    for c in pod.containers:
        for d in c.devices:
            for i in d.device_ids:
                gpu = gpu_of(i, known)
                if gpu is not None:
                    devices.setdefault(i, gpu)
        for cd in c.claims:
            claims[f"{cd.driver}/{cd.pool}/{cd.device}"] = None
    return Held(uid, node, tuple(devices.items()), tuple(claims))


def mismatches(found: list[Held], grants: list[Grant]) -> list[Discrepancy]:
    """One finding per granted GPU the pod does not hold, and per held GPU no grant names."""
    by_pod: dict[str, list[Grant]] = defaultdict(list)
    for g in grants:
        by_pod[g.pod_uid].append(g)
    out: list[Discrepancy] = []
    for h in found:
        mine = by_pod.get(h.pod_uid, [])
        if not h.devices or not mine:
            continue
        granted = [g.gpu_uuid for g in mine]
        for g, got in zip(mine, pair(granted, h.gpus), strict=True):
            if got != g.gpu_uuid:
                out.append(_mismatch(h, g.gpu_uuid, got, g.memory_mib, granted))
        for extra in unpaired(granted, h.gpus):
            out.append(_mismatch(h, extra, extra, 0, granted))
    return out


def _mismatch(h: Held, gpu: str, got: str | None, mib: int, granted: list[str]) -> Discrepancy:
    ids = ",".join(i for i, g in h.devices if g == got) if got else ""
    if got is None:
        what = f"granted {gpu} ({mib} MiB), received no device on it"
    elif got == gpu:  # held, and no grant is left to pair it with
        what = f"received {gpu} ({ids}), granted only {', '.join(granted)}"
    else:
        what = f"granted {gpu} ({mib} MiB), received {got} ({ids})"
    return Discrepancy(EventKind.MISMATCH, h.node, gpu, h.pod_uid, mib, what)


def received_gpus(found: list[Held]) -> dict[str, set[str]]:
    """The GPUs each pod holds per kubelet: a process there is a mismatch, not a leak."""
    return {h.pod_uid: set(h.gpus) for h in found if h.devices}

"""The whole node beside its GPUs: allocatable CPU and memory, and what pods request of it.

kube-scheduler's NodeResourcesFit refuses a node whose allocatable CPU or memory cannot
take the pod's requests; a GPU behind such a node is stranded for every pod that needs
CPU too (FGD's fragmentation counts it so: ``scoring.fragmentation``). The extender
therefore keeps, per node, the allocatable (from the Node object, or in standalone mode
the agent report's ``allocatable``) and the requests of the pods on it, as kube-scheduler
counts a pod's requests (``pod_requests``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from extender.core.quantity import (
    QuantityError,
    quantity_to_mib,
    quantity_to_mib_down,
    quantity_to_milli,
    quantity_to_milli_down,
)
from extender.wire.protocol import Container, Pod


def allocatable_of(values: Mapping[str, str], where: str) -> tuple[int, int]:
    """(CPU milli, memory MiB) of an allocatable map; 0 for a resource it does not name.
    Raises ValueError naming ``where`` and the key on a quantity that cannot be read."""
    out = []
    for key, read in (("cpu", quantity_to_milli_down), ("memory", quantity_to_mib_down)):
        text = values.get(key)
        try:
            out.append(max(read(text.strip()), 0) if text else 0)
        except (QuantityError, ValueError) as e:
            raise ValueError(f"{where}.{key}: {e} (write e.g. '64' or '256Gi')") from None
    return out[0], out[1]


def pod_requests(pod: Pod) -> tuple[int, int]:
    """(CPU milli, memory MiB) the pod requests of its node, as kube-scheduler counts it
    (``resourcehelper.PodRequests``): the app containers' sum plus every sidecar (an init
    container with restartPolicy Always), or an ordinary init container with the sidecars
    started before it, whichever is larger; plus the pod's overhead."""
    app = _sum(pod.spec.containers)
    sidecars, init = (0, 0), (0, 0)
    for c in pod.spec.initContainers or []:
        req = _requests(c)
        if c.restartPolicy == "Always":
            sidecars = _add(sidecars, req)
            init = _max(init, sidecars)
        else:
            init = _max(init, _add(req, sidecars))
    total = _max(_add(app, sidecars), init)
    return _add(total, _read(pod.spec.overhead or {}))


def _requests(c: Container) -> tuple[int, int]:
    res = c.resources
    if res is None:
        return (0, 0)
    # the API server copies limits into missing requests; a pod read before that (a
    # standalone filter) counts its limits the same way
    return _read({**(res.limits or {}), **(res.requests or {})})


def _read(values: Mapping[str, str]) -> tuple[int, int]:
    cpu, mem = values.get("cpu"), values.get("memory")
    try:
        return (quantity_to_milli(cpu) if cpu else 0, quantity_to_mib(mem) if mem else 0)
    except QuantityError:
        return (0, 0)  # the API server refuses such a pod; nothing to count


def _sum(containers: list[Container]) -> tuple[int, int]:
    total = (0, 0)
    for c in containers:
        total = _add(total, _requests(c))
    return total


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0] + b[0], a[1] + b[1])


def _max(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (max(a[0], b[0]), max(a[1], b[1]))


class HostLoad:
    """Per node, the requests of the pods on it (pod uid -> (node, CPU, memory)). Not
    locked itself: the inventory writes and reads it under its lock."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, int, int]] = {}
        self._by_node: dict[str, tuple[int, int]] = defaultdict(lambda: (0, 0))

    def put(self, uid: str, node: str, cpu_milli: int, memory_mib: int) -> set[str]:
        """The pod's requests on ``node`` (replacing what it had); the nodes changed. The
        watch repeats a pod on every status update: the same requests change nothing, so
        the node's cached evaluations stay."""
        if self._pods.get(uid) == (node, cpu_milli, memory_mib):
            return set()
        touched = self.drop(uid)
        if node and (cpu_milli or memory_mib):
            self._pods[uid] = (node, cpu_milli, memory_mib)
            self._by_node[node] = _add(self._by_node[node], (cpu_milli, memory_mib))
            touched.add(node)
        return touched

    def drop(self, uid: str) -> set[str]:
        """The pod is gone; the node it was on (if any) as a set."""
        held = self._pods.pop(uid, None)
        if held is None:
            return set()
        node, cpu, mem = held
        left = _add(self._by_node[node], (-cpu, -mem))
        if left == (0, 0):
            del self._by_node[node]
        else:
            self._by_node[node] = left
        return {node}

    def keep_only(self, live: set[str]) -> set[str]:
        """Drop every pod not in ``live`` (a re-list); the nodes changed."""
        touched: set[str] = set()
        for uid in [u for u in self._pods if u not in live]:
            touched |= self.drop(uid)
        return touched

    def requested(self, node: str) -> tuple[int, int]:
        return self._by_node.get(node, (0, 0))

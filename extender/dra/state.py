"""What the cluster says about DRA, cached from watches: ResourceSlices by node,
DeviceClasses, ResourceClaims. Read by filter/prioritize (no API calls there) and by
claim ingestion. Thread-safe: watch threads write, request threads read snapshots.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from extender.dra.capacity import Amounts, consumed_by
from extender.wire.protocol import Pod

Obj = dict[str, Any]


class DraState:
    def __init__(self) -> None:
        self._slices: dict[str, Obj] = {}
        self._by_node: dict[str, dict[str, Obj]] = defaultdict(dict)
        self._classes: dict[str, Obj] = {}
        self._claims: dict[tuple[str, str], Obj] = {}
        self._lock = threading.Lock()

    # --- writes from watches ----------------------------------------------------------

    def put_slice(self, obj: Obj, deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            old = self._slices.pop(name, None)
            if old is not None:
                self._by_node[_slice_node(old)].pop(name, None)
            if not deleted:
                self._slices[name] = obj
                self._by_node[_slice_node(obj)][name] = obj

    def put_class(self, obj: Obj, deleted: bool = False) -> None:
        with self._lock:
            if deleted:
                self._classes.pop(obj["metadata"]["name"], None)
            else:
                self._classes[obj["metadata"]["name"]] = obj

    def put_claim(self, obj: Obj, deleted: bool = False) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        with self._lock:
            if deleted:
                self._claims.pop(key, None)
            else:
                self._claims[key] = obj

    def replace(self, kind: str, items: list[Obj]) -> None:
        put = {"slice": self.put_slice, "class": self.put_class, "claim": self.put_claim}[kind]
        with self._lock:
            if kind == "slice":
                self._slices.clear()
                self._by_node.clear()
            elif kind == "class":
                self._classes.clear()
            else:
                self._claims.clear()
        for obj in items:
            put(obj)

    # --- reads ------------------------------------------------------------------------

    def slices_on(self, node: str) -> list[Obj]:
        with self._lock:
            return list(self._by_node.get(node, {}).values())

    def all_slices(self) -> list[Obj]:
        with self._lock:
            return list(self._slices.values())

    def classes(self) -> dict[str, Obj]:
        with self._lock:
            return {name: obj.get("spec") or {} for name, obj in self._classes.items()}

    def extended_class(self, resource: str) -> str | None:
        """The DeviceClass whose ``extendedResourceName`` is ``resource`` (KEP-5004: DRA
        serves plain ``nvidia.com/gpu`` requests on nodes whose allocatable lacks it)."""
        with self._lock:
            for name, obj in self._classes.items():
                if (obj.get("spec") or {}).get("extendedResourceName") == resource:
                    return name
        return None

    def allocated(self) -> set[tuple[str, str, str]]:
        """(driver, pool, device) held by any allocated claim (a shareable device's shares
        are counted by ``consumed``, not here)."""
        return {
            (r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in self._results()
        }

    def consumed(self) -> dict[tuple[str, str, str], Amounts]:
        """Σ ``consumedCapacity`` per shareable device over every allocated claim."""
        return consumed_by(self._results())

    def _results(self) -> list[Obj]:
        with self._lock:
            claims = list(self._claims.values())
        out: list[Obj] = []
        for c in claims:
            results = ((c.get("status") or {}).get("allocation") or {}).get("devices") or {}
            out.extend(r for r in results.get("results") or [] if isinstance(r, dict))
        return out

    def requests_of(self, pod: Pod) -> list[Obj] | None:
        """Every device request of the pod's claims, or None while a claim is unknown
        (a template's claim not created yet): the caller then does not filter."""
        ns = pod.metadata.namespace or "default"
        generated = {s.name: s.resourceClaimName for s in pod.status.resourceClaimStatuses or []}
        requests: list[Obj] = []
        with self._lock:
            for entry in pod.spec.resourceClaims or []:
                name = entry.resourceClaimName or generated.get(entry.name)
                claim = self._claims.get((ns, name)) if name else None
                if claim is None:
                    return None
                spec = (claim.get("spec") or {}).get("devices") or {}
                requests.extend(spec.get("requests") or [])
        return requests


def _slice_node(obj: Obj) -> str:
    return str((obj.get("spec") or {}).get("nodeName") or "")

"""Host PID -> (pod UID, container id) from ``/proc/<pid>/cgroup``.

NVML reports host PIDs and nothing else; the kubelet puts every container of a pod
under a pod-level cgroup whose name carries the pod UID, and the runtime names the
container's own cgroup after the container id. So the owner of a GPU process can be
read from one small file, with no kubelet or CRI call on the hot path (this is also
what dcgm-exporter does; see docs/protocol.md §4.3).

Layouts handled (all seen in real nodes; the tests cite where each line comes from):

* cgroup v2 (``0::<path>``) and v1 (``N:controller:<path>``, many lines; on hybrid
  hosts the ``0::`` line is *not* the pod's, so every line is examined).
* kubelet cgroup driver ``systemd`` (``kubepods-<qos>-pod<uid_with_underscores>.slice``)
  and ``cgroupfs`` (``/kubepods/<qos>/pod<uid-with-dashes>``); guaranteed pods have no
  QoS level; kind/minikube/dind put the tree under a prefix (``/kubelet/``, ``/docker/<id>/``,
  ``kubelet.slice/kubelet-kubepods...``) or relative to the reader's cgroup namespace (``../``).
* runtimes: containerd (``cri-containerd-<id>.scope``, or ``...slice:cri-containerd:<id>``
  with the v1 systemd cgroupsPath form), CRI-O (``crio-<id>.scope``, ``crio-conmon-<id>``
  is the monitor, not the container), Docker (``docker-<id>.scope``), plain ``<id>``
  with cgroupfs.
* static pods: the UID is the 32-hex config hash instead of a dashed UUID (it is the UID
  the kubelet uses; the mirror pod in the API server has another one).

The parser is a pure function over the file text; ``ProcAttributor`` is the thin reader.
"""

from __future__ import annotations

import re
from pathlib import Path

from drivers.attribution.pods import Attribution, unmapped

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_HASH_UID = r"[0-9a-fA-F]{32}"
# A pod segment: "pod<uid>" (cgroupfs) or "...kubepods[-qos]-pod<uid>.slice" (systemd),
# optionally followed by the v1 systemd cgroupsPath tail ":<prefix>:<container id>".
_POD_SEGMENT = re.compile(
    rf"^(?:[\w.-]*-)?pod(?P<uid>{_UID}|{_HASH_UID})(?:\.slice)?(?::(?P<tail>.*))?$"
)
_CONTAINER = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio-conmon|crio|docker|containerd|cri-o)-)?"
    r"(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
_MAX_REASON_PATH = 160


def pod_from_cgroup(text: str) -> Attribution:
    """Map the contents of one ``/proc/<pid>/cgroup`` file to a pod, or say why not."""
    paths = [p for p in (_line_path(line) for line in text.splitlines()) if p is not None]
    if not paths:
        return unmapped("empty or unreadable cgroup file")
    for path in paths:
        found = pod_from_path(path)
        if found is not None:
            return found
    return unmapped(f"not a pod cgroup: {_shown(_best_path(paths))}")


def pod_from_path(path: str) -> Attribution | None:
    """Pod and container for one cgroup path; None when the path is not a pod's."""
    if "kubepods" not in path:
        return None
    segments = [s for s in path.split("/") if s and s != ".."]
    for i, segment in enumerate(segments):
        m = _POD_SEGMENT.match(segment)
        if m is None:
            continue
        uid = m["uid"].replace("_", "-").lower()
        if m["tail"] is not None:  # v1 systemd form: "<pod>.slice:cri-containerd:<id>"
            container = _container_id(m["tail"].rsplit(":", 1)[-1])
        else:
            container = _first_container(segments[i + 1 :])
        return Attribution(pod_uid=uid, container_id=container)
    return None


def _line_path(line: str) -> str | None:
    """The path of one ``hierarchy:controllers:path`` line (paths may contain ':')."""
    parts = line.strip().split(":", 2)
    if len(parts) != 3 or not parts[2]:
        return None
    return parts[2]


def _first_container(segments: list[str]) -> str | None:
    for segment in segments:
        found = _container_id(segment)
        if found is not None:
            return found
    return None


def _container_id(segment: str) -> str | None:
    m = _CONTAINER.match(segment)
    if m is None or m["prefix"] == "crio-conmon":  # CRI-O's monitor, not a container
        return None
    return m["id"]


def _best_path(paths: list[str]) -> str:
    """The path worth showing a person: the v2 one if it says something, else the first."""
    meaningful = [p for p in paths if p != "/"]
    return (meaningful or paths)[0]


def _shown(path: str) -> str:
    if len(path) <= _MAX_REASON_PATH:
        return path
    return path[:_MAX_REASON_PATH] + "..."


class ProcAttributor:
    """Read ``<proc_root>/<pid>/cgroup`` and map it; never raises for a bad PID.

    ``proc_root`` is ``/proc`` on a node (the agent needs ``hostPID: true``: NVML's PIDs
    are host PIDs) and a temporary fake tree in tests.
    """

    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.proc_root = Path(proc_root)

    def __call__(self, pid: int) -> Attribution:
        path = self.proc_root / str(pid) / "cgroup"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            return unmapped("process gone (or not visible: the agent needs hostPID: true)")
        except PermissionError:
            return unmapped(f"permission denied reading {path}")
        except OSError as e:
            return unmapped(f"cannot read {path}: {e.strerror or type(e).__name__}")
        return pod_from_cgroup(text)

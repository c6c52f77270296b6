"""The plugin's own checkpoint: every answer it gave, so a re-Allocate answers the same.

Why: after a kubelet restart (or a node reboot) kubelet re-Allocates containers that are
already running. By then their grants are acknowledged, so ``grants.match`` would find no
pending pod; the checkpoint (keyed by the exact device set) returns the first answer.
It lives beside kubelet's own checkpoint in the device-plugins directory: kubelet's
restart removes the sockets there, never regular files, and no extra hostPath is needed.
Entries of pods that no longer exist or have finished (a pod kubelet rejected is Failed)
are dropped (``prune``), which is how a deleted pod or a failed admission releases what
it held.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger("headroom.deviceplugin")

VERSION = 1


@dataclass(frozen=True, slots=True)
class Answer:
    """One Allocate answer for one container's device set."""

    devices: tuple[str, ...]  # sorted slot ids
    pod_uid: str
    pod: str  # namespace/name, for people reading the file
    envs: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


class Checkpoint:
    """A JSON file of ``Answer``s, rewritten atomically on every change; thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, ...], Answer] = self._load()

    def get(self, devices: list[str] | tuple[str, ...]) -> Answer | None:
        with self._lock:
            return self._answers.get(tuple(sorted(devices)))

    def of_pod(self, pod_uid: str) -> list[Answer]:
        with self._lock:
            return [a for a in self._answers.values() if a.pod_uid == pod_uid]

    def put(self, answer: Answer) -> None:
        with self._lock:
            self._answers[answer.devices] = answer
            self._save()

    def drop(self, devices: tuple[str, ...]) -> None:
        with self._lock:
            if self._answers.pop(devices, None) is not None:
                self._save()

    def prune(self, live_pod_uids: set[str]) -> list[Answer]:
        """Forget answers of pods that no longer exist; returns what was released."""
        with self._lock:
            gone = [a for a in self._answers.values() if a.pod_uid not in live_pod_uids]
            for a in gone:
                del self._answers[a.devices]
            if gone:
                self._save()
            return gone

    def _load(self) -> dict[tuple[str, ...], Answer]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            # a torn or foreign file must not stop the plugin; acknowledged pods are
            # still recognised from their headroom.dev/allocated annotation
            log.warning("device plugin checkpoint %s unreadable (%s); starting empty", self.path, e)
            return {}
        out: dict[tuple[str, ...], Answer] = {}
        for row in doc.get("answers", []) if isinstance(doc, dict) else []:
            try:
                a = Answer(
                    devices=tuple(sorted(row["devices"])),
                    pod_uid=str(row["pod_uid"]),
                    pod=str(row.get("pod", "")),
                    envs={str(k): str(v) for k, v in row.get("envs", {}).items()},
                    cdi_devices=tuple(row.get("cdi_devices", ())),
                )
            except (KeyError, TypeError, AttributeError):
                continue
            out[a.devices] = a
        return out

    def _save(self) -> None:
        doc = {"version": VERSION, "answers": [asdict(a) for a in self._answers.values()]}
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

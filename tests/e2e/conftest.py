"""Fixtures that run a real etcd + kube-apiserver (+ kube-scheduler) on 127.0.0.1.

* ``e2e_cluster`` (session): builds the binaries with tests/e2e/build.sh (cached outside
  the checkout), starts etcd and kube-apiserver, waits for /readyz, writes a kubeconfig,
  creates the ``default`` ServiceAccount (there is no kube-controller-manager), and kills
  every process group at session end.
* ``k8s_client`` (session): a ``kubernetes.client.ApiClient`` for that kubeconfig.
* ``kube_scheduler`` (function): factory ``start(extender_url | None) -> Scheduler``.
* ``namespace`` / ``make_node``: per-test objects, removed at teardown.

e2e tests run by default (set HEADROOM_E2E=0 to skip them; without Go on PATH they are
skipped with that reason). When an e2e test fails, the tail of every process log is
attached to its report.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from .cluster import ClusterError, ControlPlane, Scheduler, build_binaries, ready_node_body
from .headroom_proc import Headroom

_PLANE_KEY = pytest.StashKey[ControlPlane]()
_SCHEDULER_IDS = itertools.count()  # one config + log file per scheduler in the session


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # e2e runs by default (it is part of the README's test command); HEADROOM_E2E=0 opts out
    reason = None
    if os.environ.get("HEADROOM_E2E") == "0":
        reason = "e2e tests disabled with HEADROOM_E2E=0"
    elif shutil.which("go") is None:
        reason = "e2e tests need the Go toolchain (go) on PATH to build the control plane"
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    plane = item.session.stash.get(_PLANE_KEY, None)
    if report.failed and plane is not None and item.get_closest_marker("e2e") is not None:
        report.sections.append(("control-plane logs (tail)", plane.log_tails()))
    return report


@pytest.fixture(scope="session")
def e2e_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("e2e-cluster")
    (workdir / "logs").mkdir()
    try:
        bin_dir = build_binaries(workdir / "logs" / "build.log")
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    plane = ControlPlane(workdir=workdir, bin_dir=bin_dir)
    request.session.stash[_PLANE_KEY] = plane
    try:
        plane.start()
        api = k8s_config.new_client_from_config(config_file=str(plane.kubeconfig))
        # ServiceAccount admission needs the "default" SA, normally made by the
        # controller-manager's serviceaccount controller, which does not run here.
        _ensure_default_sa(k8s.CoreV1Api(api), "default")
        api.close()
    except ClusterError as exc:
        plane.stop()
        pytest.fail(f"{exc}\n{plane.log_tails()}", pytrace=False)
    except BaseException:
        plane.stop()
        raise
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def k8s_client(e2e_cluster: ControlPlane) -> Iterator[k8s.ApiClient]:
    api = k8s_config.new_client_from_config(config_file=str(e2e_cluster.kubeconfig))
    yield api
    api.close()


@pytest.fixture
def kube_scheduler(e2e_cluster: ControlPlane) -> Iterator[Callable[[str | None], Scheduler]]:
    """Start a real kube-scheduler; ``None`` means a config with no extenders.

    Starting a second one stops the first (both would be ``default-scheduler``).
    """
    started: list[Scheduler] = []

    def start(extender_url: str | None) -> Scheduler:
        for s in started:
            s.stop()
        sched = Scheduler(e2e_cluster, extender_url, name=f"kube-scheduler-{next(_SCHEDULER_IDS)}")
        started.append(sched)
        try:
            sched.start()
        except ClusterError as exc:
            pytest.fail(str(exc), pytrace=False)
        return sched

    yield start
    for s in started:
        s.stop()


def _ensure_default_sa(core: k8s.CoreV1Api, ns: str) -> None:
    body: Any = {"metadata": {"name": "default", "namespace": ns}}
    try:
        core.create_namespaced_service_account(ns, body)
    except ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture
def namespace(k8s_client: k8s.ApiClient) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount; pods are force-deleted after."""
    core = k8s.CoreV1Api(k8s_client)
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    ns_body: Any = {"metadata": {"name": name}}
    core.create_namespace(ns_body)
    _ensure_default_sa(core, name)
    yield name
    # No kubelet: bound pods never finish graceful deletion, so use grace 0.
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    # Stays Terminating (no namespace controller); harmless in a throwaway cluster.
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.fixture
def make_node(k8s_client: k8s.ApiClient) -> Iterator[Callable[..., str]]:
    """Create a Ready Node object (no kubelet behind it); deleted at teardown.

    The TaintNodesByCondition admission plugin adds ``node.kubernetes.io/not-ready`` on
    create and only the (absent) node lifecycle controller would remove it, so the
    helper clears the taints and (re)writes the status after creating the node.
    """
    core = k8s.CoreV1Api(k8s_client)
    made: list[str] = []

    def make(name: str, **kwargs: Any) -> str:
        body: Any = ready_node_body(name, **kwargs)
        core.create_node(body)
        made.append(name)
        core.patch_node(name, {"spec": {"taints": []}})
        core.patch_node_status(name, {"status": body["status"]})
        return name

    yield make
    for name in made:
        with contextlib.suppress(ApiException):
            core.delete_node(name)


@pytest.fixture
def headroom(e2e_cluster: Any, tmp_path: Path) -> Iterator[Headroom]:
    """``headroom serve`` watching the session's cluster (default settings), stopped after."""
    h = Headroom(tmp_path, e2e_cluster.kubeconfig)
    h.start()
    yield h
    h.stop()

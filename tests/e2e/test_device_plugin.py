"""``headroom device-plugin`` against kubelet's own device manager and a real API server.

The Go harness (tests/e2e/kubeletdm) runs k8s.io/kubernetes' devicemanager for one node
and admits the pods bound to it as kubelet does; the plugin reads their grants from the
kube-apiserver. What a container would be started with (its env and CDI devices) must be
exactly the grant, a request that cannot be the grant must be refused by kubelet's own
admission, and the answers must survive kubelet and plugin restarts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from drivers.gpu.simulated import SimulatedDriver
from extender.wire.annotations import ANN_ALLOCATED, ANN_GPU_MEMORY_MIB, ANN_GPU_UUIDS

from .headroom_proc import Headroom
from .kubelet_proc import Kubelet, Plugin, build_harness, wait_for
from .test_scheduling import pod_body, uid_of, wait_bound

pytestmark = pytest.mark.e2e

SPEC = "2xA10G:24Gi"


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = tmp_path_factory.mktemp("kubeletdm-build") / "build.log"
    try:
        return build_harness(log)
    except Exception as exc:
        pytest.fail(f"building tests/e2e/kubeletdm failed: {exc}\n{log.read_text()[-4000:]}")


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="kdm", dir="/tmp"))  # short: socket paths <= 107 bytes
    yield d
    shutil.rmtree(d, ignore_errors=True)


def granted_pod(name: str, node: str, gpus: list[str], mib: int) -> dict[str, Any]:
    """A pod as the extender's bind leaves it: on the node, with its grant annotated."""
    return {
        "metadata": {
            "name": name,
            "annotations": {ANN_GPU_UUIDS: ",".join(gpus), ANN_GPU_MEMORY_MIB: str(mib)},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": str(len(gpus))}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def given(admission: dict[str, Any]) -> dict[str, Any]:
    """The one container's env, CDI devices and slot ids; kubelet's pod-resources API
    must name the same slots as its device manager."""
    assert admission["admitted"], admission
    (c,) = admission["containers"]
    assert not c.get("error"), c
    assert sorted(c["podResources"]["nvidia.com/gpu"]) == c["devices"]["nvidia.com/gpu"], c
    return {"envs": c["envs"], "cdi": c["cdiDevices"], "ids": c["devices"]["nvidia.com/gpu"]}


def test_kubelet_gives_each_container_exactly_its_grant(
    harness: Path,
    kubelet_dir: Path,
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    core: Any = k8s.CoreV1Api(k8s_client)
    node = make_node("dp-node", gpus=6)
    spec = "3xA10G:24Gi"
    g0, g1, g2 = SimulatedDriver(spec, seed=1, node=node).gpu_uuids
    kubelet = Kubelet(
        harness, kubelet_dir / "device-plugins", e2e_cluster.kubeconfig, node, tmp_path
    )
    plugin = Plugin(kubelet_dir, e2e_cluster.kubeconfig, node, spec, tmp_path)
    kubelet.start()
    plugin.start()
    try:
        # one GPU, steered to the granted card (kubelet alone would take GPU 0's slot)
        core.create_namespaced_pod(namespace, granted_pod("one", node, [g1], 8192))
        one = given(kubelet.admission(f"{namespace}/one"))
        assert one["envs"] == {"NVIDIA_VISIBLE_DEVICES": g1, "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m"}
        assert one["cdi"] == [f"nvidia.com/gpu={g1}"]
        assert all(i.startswith(g1 + "::") for i in one["ids"]) and len(one["ids"]) == 1
        ann = core.read_namespaced_pod("one", namespace).metadata.annotations
        assert ann[ANN_ALLOCATED] == ",".join(one["ids"])

        # two GPUs: one slot on each, in grant order
        core.create_namespaced_pod(namespace, granted_pod("two", node, [g0, g1], 4096))
        two = given(kubelet.admission(f"{namespace}/two"))
        assert two["envs"] == {
            "NVIDIA_VISIBLE_DEVICES": f"{g0},{g1}",
            "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
            "CUDA_DEVICE_MEMORY_LIMIT_1": "4096m",
        }
        assert sorted(i.split("::")[0] for i in two["ids"]) == sorted([g0, g1])

        # GPU 1's two slots are taken: kubelet can only offer another GPU, which is not
        # the grant, so the plugin refuses and kubelet's admission fails the pod
        core.create_namespaced_pod(namespace, granted_pod("wrong", node, [g1], 4096))
        wrong = kubelet.admission(f"{namespace}/wrong")
        assert not wrong["admitted"]
        assert wrong["reason"] == "UnexpectedAdmissionError"
        assert "not on the GPUs granted" in wrong["message"] and g1 in wrong["message"]
        wait_for(
            lambda: core.read_namespaced_pod("wrong", namespace).status.phase == "Failed",
            "the refused pod marked Failed",
        )
        pod = core.read_namespaced_pod("wrong", namespace)
        assert ANN_ALLOCATED not in (pod.metadata.annotations or {})

        # kubelet restarts: it removes the plugin's socket and serves a new kubelet.sock;
        # the plugin re-registers, running pods keep their answers, a new pod is served
        seen = len(kubelet.admissions())
        kubelet.stop()
        kubelet.start()
        for name, before in (("one", one), ("two", two)):
            after = given(kubelet.admission(f"{namespace}/{name}", after=seen))
            assert after == before, name
        core.create_namespaced_pod(namespace, granted_pod("three", node, [g0], 2048))
        three = given(kubelet.admission(f"{namespace}/three", after=seen))
        assert three["envs"]["NVIDIA_VISIBLE_DEVICES"] == g0

        # the plugin restarts and a pod is deleted: its slot is free again for the next
        # grant on that GPU, and the plugin's checkpoint forgets the deleted pod
        plugin.stop()
        plugin.start()
        core.delete_namespaced_pod("one", namespace, grace_period_seconds=0)
        wait_for(lambda: not _exists(core, namespace, "one"), "pod one deleted")
        core.create_namespaced_pod(namespace, granted_pod("four", node, [g1], 1024))
        four = given(kubelet.admission(f"{namespace}/four", after=seen))
        assert four["envs"]["NVIDIA_VISIBLE_DEVICES"] == g1
        assert four["ids"] == one["ids"]  # the only free slot on GPU 1

        # an init container's devices are reused by the app container: kubelet calls
        # Allocate twice with the same slot, and the second gets the first's answer
        init = granted_pod("init", node, [g2], 3072)
        init["spec"]["initContainers"] = [{**init["spec"]["containers"][0], "name": "setup"}]
        core.create_namespaced_pod(namespace, init)
        reused = given(kubelet.admission(f"{namespace}/init", after=seen))
        assert reused["envs"] == {
            "NVIDIA_VISIBLE_DEVICES": g2,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "3072m",
        }
        assert reused["ids"][0].startswith(g2 + "::")
    finally:
        plugin.stop()
        kubelet.stop()


def test_scheduled_pods_run_on_the_ledgers_gpus(
    harness: Path,
    kubelet_dir: Path,
    e2e_cluster: Any,
    k8s_client: k8s.ApiClient,
    kube_scheduler: Any,
    make_node: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The whole chain: kube-scheduler, the extender's bind (ledger + annotations), kubelet's
    device manager, the plugin. Each container's GPUs and memory limit are the ledger's.

    Pods are created one after another (each admitted before the next is bound) on a
    node without the plugin label, so the extender does not wait for acknowledgements;
    the burst through the waiting rule is tests/e2e/test_device_plugin_burst.py.
    """
    core: Any = k8s.CoreV1Api(k8s_client)
    node = make_node("dp-chain", gpus=4, capacity_type="on-demand")  # 2 GPUs x 2 slots
    headroom = Headroom(tmp_path, e2e_cluster.kubeconfig)
    headroom.start()
    kubelet = Kubelet(
        harness, kubelet_dir / "device-plugins", e2e_cluster.kubeconfig, node, tmp_path
    )
    plugin = Plugin(kubelet_dir, e2e_cluster.kubeconfig, node, SPEC, tmp_path)
    try:
        headroom.agent(node, SPEC)  # the same seed and node as the plugin: same UUIDs
        kubelet.start()
        plugin.start()
        kube_scheduler(headroom.url)
        per_gpu: dict[str, int] = {}
        # 20 GiB first: the 10 GiB pods then cannot join it and go to the other GPU while
        # the first GPU still has a free slot, which kubelet alone could hand out
        for name, memory in (("c", "20Gi"), ("a", "10Gi"), ("b", "10Gi")):
            core.create_namespaced_pod(namespace, pod_body(name, memory))
            uid = uid_of(wait_bound(core, namespace, name))
            got = given(kubelet.admission(f"{namespace}/{name}"))
            (row,) = headroom.allocations(pod=uid)
            assert got["envs"] == {
                "NVIDIA_VISIBLE_DEVICES": row["gpu_uuid"],
                "CUDA_DEVICE_MEMORY_LIMIT_0": f"{row['memory_mib']}m",
            }, name
            assert got["cdi"] == [f"nvidia.com/gpu={row['gpu_uuid']}"]
            # kubelet's own records (checkpoint, pod-resources) name the ledger's GPU too
            assert [i.split("::")[0] for i in got["ids"]] == [row["gpu_uuid"]]
            per_gpu[row["gpu_uuid"]] = per_gpu.get(row["gpu_uuid"], 0) + row["memory_mib"]
        assert sorted(per_gpu.values()) == [20480, 20480], per_gpu
    finally:
        plugin.stop()
        kubelet.stop()
        headroom.stop()


def _exists(core: Any, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True

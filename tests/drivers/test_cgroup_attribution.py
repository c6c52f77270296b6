"""PID -> pod attribution from /proc/<pid>/cgroup, on cgroup lines taken from public
test suites of projects that parse the same files in production. Each case names its
source (repository + path); the text is reproduced as it appears there."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.attribution.cgroup import ProcAttributor, pod_from_cgroup
from drivers.attribution.pods import Attribution, CachedAttributor

# DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (cgroupV1ProcCgroup): cgroup v1
# hybrid host, cgroupfs driver, containerd; note the 0:: line is containerd.service.
V1_HYBRID_CGROUPFS = """\
12:rdma:/
11:memory:/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f
10:hugetlb:/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f
9:devices:/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f
2:pids:/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f
1:name=systemd:/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f
0::/system.slice/containerd.service
"""

# DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (cgroupV1ProcCgroupWithColons):
# cgroup v1, systemd driver, containerd writes "<pod slice>:cri-containerd:<id>".
V1_SYSTEMD_COLONS = """\
13:misc:/kubepods-burstable-pod5be537b8_3a4e_4607_af71_31598b3a4fd3.slice:cri-containerd:1c8f503430973935b7d8a80c4f58c0946b052a021e6855b358e5ec38601af120
10:pids:/kuberuntime.slice/containerd.service/kubepods-burstable-pod5be537b8_3a4e_4607_af71_31598b3a4fd3.slice:cri-containerd:1c8f503430973935b7d8a80c4f58c0946b052a021e6855b358e5ec38601af120
8:memory:/kuberuntime.slice/containerd.service/kubepods-burstable-pod5be537b8_3a4e_4607_af71_31598b3a4fd3.slice:cri-containerd:1c8f503430973935b7d8a80c4f58c0946b052a021e6855b358e5ec38601af120
0::/
"""

# DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (dindProcCgroup): docker-in-docker
# (kind-like) node, the kubelet tree under /docker/<id>/kubelet/.
V1_DIND = """\
14:name=systemd:/docker/88ea268ece65a02d68b169fd74bcbcb427eb7f28900db0e3b906fb2eeb7341df/kubelet/kubepods/burstable/poda5ea884f-9e60-4912-bd62-fef9a31db47a/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015e
13:rdma:/
5:memory:/docker/88ea268ece65a02d68b169fd74bcbcb427eb7f28900db0e3b906fb2eeb7341df/kubelet/kubepods/burstable/poda5ea884f-9e60-4912-bd62-fef9a31db47a/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015e
0::/docker/88ea268ece65a02d68b169fd74bcbcb427eb7f28900db0e3b906fb2eeb7341df/system.slice/containerd.service
"""

# neuvector/neuvector share/system/cgroup_test.go (TestK8sCrio_v1_19): CRI-O 1.19, v1, systemd.
V1_CRIO = """\
12:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope
6:rdma:/
3:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope
1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope
"""

# neuvector/neuvector share/system/cgroup_test.go (TestK8sCrio_v1_17): a static pod, whose
# UID is the 32-hex config hash.
V1_CRIO_STATIC_POD = (
    "3:memory:/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod487a0dc6dccaeefbcfedba7a7ce1ca18.slice/"
    "crio-7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e.scope\n"
)

CASES = [
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go (TestProcsFindContainerId)
        "4:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podeb052b63_ea96_4728_ab4a_64ab3babccd7.slice/cri-containerd-5694f82f44168cc048e014ae14d1b0c8ef673bec49f329dc169911ea638f63c2.scope",
        "eb052b63-ea96-4728-ab4a-64ab3babccd7",
        "5694f82f44168cc048e014ae14d1b0c8ef673bec49f329dc169911ea638f63c2",
        id="v1-systemd-containerd-besteffort",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podeb653d22_2525_47ca_9fc4_3762497ae1d2.slice/docker-84e9ffffe97fea4c5a0f01d401611cbafbf7e559fc6190ed74abfc2b25e889d4.scope",
        "eb653d22-2525-47ca-9fc4-3762497ae1d2",
        "84e9ffffe97fea4c5a0f01d401611cbafbf7e559fc6190ed74abfc2b25e889d4",
        id="v2-systemd-docker",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go (minikube, systemd in docker)
        "0::/system.slice/docker-1b3319ed9c1d4cca681f9c102da9b015555785b6240c4e4619f11b535cabdc07.scope/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podeb653d22_2525_47ca_9fc4_3762497ae1d2.slice/docker-84e9ffffe97fea4c5a0f01d401611cbafbf7e559fc6190ed74abfc2b25e889d4.scope",
        "eb653d22-2525-47ca-9fc4-3762497ae1d2",
        "84e9ffffe97fea4c5a0f01d401611cbafbf7e559fc6190ed74abfc2b25e889d4",
        id="v2-nested-in-node-container",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go (minikube, containerd, cgroupfs)
        "0::/kubepods/besteffort/pod13cb8437-00ed-40e4-99d8-e17193a58086/a5a6a3af5d51ad95b915ca948710b90a94abc279e84963b9d22a39f342ce67d9",
        "13cb8437-00ed-40e4-99d8-e17193a58086",
        "a5a6a3af5d51ad95b915ca948710b90a94abc279e84963b9d22a39f342ce67d9",
        id="v2-cgroupfs-besteffort",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go (kind, cgroupfs, guaranteed:
        # no QoS level between kubepods and the pod)
        "0::/system.slice/docker-c1146e7ccca9ab4436abd69923c07d097b37b762ed21cc3f24584c2f84e77c57.scope/kubelet/kubepods/pod55db13a1-c151-4cdd-a48b-e002a2b1fb58/21e677e6fe95215ea48bcb5609c10e67ba8e76a7a3ea749af704e72260eb93fe",
        "55db13a1-c151-4cdd-a48b-e002a2b1fb58",
        "21e677e6fe95215ea48bcb5609c10e67ba8e76a7a3ea749af704e72260eb93fe",
        id="v2-cgroupfs-guaranteed-kind",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go (kind static pod: hash UID)
        "0::/system.slice/docker-c1146e7ccca9ab4436abd69923c07d097b37b762ed21cc3f24584c2f84e77c57.scope/kubelet/kubepods/burstable/pod09a70ae9ccc491e651e5c773579b3490/b0e6aa50e847c3d3b1880e307ec7996040275c8063832cffc9274defce2cb655",
        "09a70ae9ccc491e651e5c773579b3490",
        "b0e6aa50e847c3d3b1880e307ec7996040275c8063832cffc9274defce2cb655",
        id="v2-cgroupfs-static-pod",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go ("Cgroupv1 Hierarchy with
        # CgroupPath set")
        "4:pids:/podruntime.slice/containerd.service/kubepods-burstable-pod29349498_197c_4919_b13f_9a928e7d001b.slice:cri-containerd:0ca2b3cd20e5f55a2bbe8d4aa3f811cf7963b40f0542ad147054b0fcb60fc400",
        "29349498-197c-4919-b13f-9a928e7d001b",
        "0ca2b3cd20e5f55a2bbe8d4aa3f811cf7963b40f0542ad147054b0fcb60fc400",
        id="v1-systemd-colon-form",
    ),
    pytest.param(
        # DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (cgroupV2ProcCgroupNoHost):
        # read from inside a cgroup namespace, so the path is relative ("../../..").
        "0::../../../kubepods-burstable.slice/kubepods-burstable-pod562c01d6_6aba_49fe_ae52_61c40c04eca4.slice/docker-a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f.scope",
        "562c01d6-6aba-49fe-ae52-61c40c04eca4",
        "a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f",
        id="v2-relative-to-cgroupns",
    ),
    pytest.param(
        # DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (cgroupV2ProcCgroup)
        "0::/kubepods/burstable/pod15513b48-e7a5-48fc-b9e3-92f713f36504/a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f",
        "15513b48-e7a5-48fc-b9e3-92f713f36504",
        "a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f",
        id="v2-cgroupfs-burstable",
    ),
    pytest.param(
        # elastic/beats libbeat/processors/add_process_metadata/add_process_metadata_test.go
        # (TestDefaultCgroupRegex "kubernetes-crio"), as a v2 line
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod69349abe_d645_11ea_9c4c_08002709c05c.slice/crio-80d85a3a585f1575028ebe468d83093c301eda20d37d1671ff2a0be50fc0e460.scope",
        "69349abe-d645-11ea-9c4c-08002709c05c",
        "80d85a3a585f1575028ebe468d83093c301eda20d37d1671ff2a0be50fc0e460",
        id="v2-systemd-crio",
    ),
    pytest.param(
        # elastic/beats libbeat/processors/add_process_metadata/add_process_metadata_test.go
        # (TestDefaultCgroupRegex "kubernetes-cri-containerd"), as a v2 line
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2d5133c0_65f3_40b2_b375_c04866d418e1.slice/cri-containerd-e01a26336924e2fb8089bcf4cf943954fd9ea616cc5678f38f65928307979459.scope",
        "2d5133c0-65f3-40b2-b375-c04866d418e1",
        "e01a26336924e2fb8089bcf4cf943954fd9ea616cc5678f38f65928307979459",
        id="v2-systemd-containerd-burstable",
    ),
    pytest.param(
        # openshift/builder pkg/build/builder/util_test.go (TestCGroupParentExtraction "systemd",
        # an older revision): guaranteed pod with the systemd driver, no QoS slice.
        "4:memory:/kubepods.slice/kubepods-podd0d034ed_5204_11e7_9710_507b9d27b5d9.slice/docker-a91b1981b6a4ae463fccd273e3f8665fd911e9abcaa1af27de773afb17ec4344.scope",
        "d0d034ed-5204-11e7-9710-507b9d27b5d9",
        "a91b1981b6a4ae463fccd273e3f8665fd911e9abcaa1af27de773afb17ec4344",
        id="v1-systemd-guaranteed",
    ),
    pytest.param(
        # NVIDIA/dcgm-exporter internal/pkg/transformation/pidmapper_test.go ("cgroups v2 with
        # underscores"): the pod-level cgroup itself, no container below it.
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice",
        "a9c80282-3f6b-4d5b-84d5-a137a6668011",
        None,
        id="v2-pod-level-only",
    ),
    pytest.param(V1_HYBRID_CGROUPFS, "15513b48-e7a5-48fc-b9e3-92f713f36504",
                 "a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015f",
                 id="v1-multiline-hybrid"),
    pytest.param(V1_SYSTEMD_COLONS, "5be537b8-3a4e-4607-af71-31598b3a4fd3",
                 "1c8f503430973935b7d8a80c4f58c0946b052a021e6855b358e5ec38601af120",
                 id="v1-multiline-colons"),
    pytest.param(V1_DIND, "a5ea884f-9e60-4912-bd62-fef9a31db47a",
                 "a51a9f7d073f848e7fc59e56e8f11524f330a2175a4ed26327da2dfe0d28015e",
                 id="v1-multiline-dind"),
    pytest.param(V1_CRIO, "8ca306fa-3c03-47fa-97dd-19979c345572",
                 "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
                 id="v1-multiline-crio"),
    pytest.param(V1_CRIO_STATIC_POD, "487a0dc6dccaeefbcfedba7a7ce1ca18",
                 "7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e",
                 id="v1-crio-static-pod"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "pod_uid", "container_id"), CASES)
def test_real_pod_cgroups_map_to_pod_and_container(
    text: str, pod_uid: str, container_id: str | None
) -> None:
    assert pod_from_cgroup(text) == Attribution(pod_uid=pod_uid, container_id=container_id)


NOT_PODS = [
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go: plain Docker, systemd driver
        "0::/system.slice/docker-ee40841f79d52f66f4958c8a484bd2dfb453228874dcca1a3f2ec6e8420ec87c.scope",
        "not a pod cgroup: /system.slice/docker-ee40841f",
        id="docker-outside-kubernetes",
    ),
    pytest.param(
        # cilium/tetragon pkg/sensors/exec/procevents/proc_test.go: the kubelet itself (kind)
        "0::/system.slice/docker-c1146e7ccca9ab4436abd69923c07d097b37b762ed21cc3f24584c2f84e77c57.scope/system.slice/kubelet.service",
        "not a pod cgroup: ",
        id="kubelet-service",
    ),
    pytest.param(
        # NVIDIA/dcgm-exporter internal/pkg/transformation/pidmapper_test.go ("no pod UID")
        "0::/system.slice/docker.service",
        "not a pod cgroup: /system.slice/docker.service",
        id="docker-service",
    ),
    pytest.param(
        # NVIDIA/dcgm-exporter internal/pkg/transformation/pidmapper_test.go ("short UID (invalid)")
        "0::/kubepods/pod123/container",
        "not a pod cgroup: /kubepods/pod123/container",
        id="kubepods-without-a-uid",
    ),
    pytest.param(
        # DataDog/datadog-agent pkg/util/cgroups/pid_mapper_test.go (ecsFargateCgroup)
        "9:memory:/ecs/8474ac4cec7a4f488834b00591271ec3/8474ac4cec7a4f488834b00591271ec3-3054012820\n",
        "not a pod cgroup: /ecs/",
        id="ecs-task",
    ),
    pytest.param("0::/\n", "not a pod cgroup: /", id="root-cgroup"),
    pytest.param("", "empty or unreadable cgroup file", id="empty-file"),
]


@pytest.mark.parametrize(("text", "reason_prefix"), NOT_PODS)
def test_non_pod_cgroups_are_unmapped_with_a_reason(text: str, reason_prefix: str) -> None:
    found = pod_from_cgroup(text)
    assert found.pod_uid is None
    assert found.reason is not None and found.reason.startswith(reason_prefix)


def test_crio_conmon_belongs_to_the_pod_but_is_not_a_container() -> None:
    # CRI-O puts its monitor beside each container: cri-o/cri-o
    # internal/config/cgmgr/cgroupfs_linux.go ("%s/crio-conmon-%s"), and the systemd manager
    # names the unit crio-conmon-<id>.scope. UID and id reused from the CRI-O 1.19 sample.
    line = (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        "kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/"
        "crio-conmon-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope"
    )
    assert pod_from_cgroup(line) == Attribution(pod_uid="8ca306fa-3c03-47fa-97dd-19979c345572")


def test_reason_for_a_long_path_is_bounded() -> None:
    text = "0::/system.slice/" + "x" * 1000 + ".service"
    reason = pod_from_cgroup(text).reason
    assert reason is not None and len(reason) < 256


# --- the thin reader over a (fake) /proc tree ------------------------------------


def _proc(tmp_path: Path, pid: int, text: str) -> None:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(text)


def test_reader_maps_pids_from_a_proc_tree(tmp_path: Path) -> None:
    _proc(tmp_path, 4242, V1_CRIO)
    _proc(tmp_path, 77, "0::/system.slice/sshd.service\n")
    attribute = ProcAttributor(tmp_path)
    assert attribute(4242).pod_uid == "8ca306fa-3c03-47fa-97dd-19979c345572"
    assert attribute(77).reason == "not a pod cgroup: /system.slice/sshd.service"


def test_reader_reports_a_gone_process(tmp_path: Path) -> None:
    found = ProcAttributor(tmp_path)(999_999)
    assert found.pod_uid is None
    assert found.reason is not None and found.reason.startswith("process gone")


def test_reader_reports_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _proc(tmp_path, 5, V1_CRIO)
    original = Path.read_text

    def deny(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "cgroup":
            raise PermissionError(13, "Permission denied")
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", deny)
    found = ProcAttributor(tmp_path)(5)
    assert found.pod_uid is None
    assert found.reason is not None and found.reason.startswith("permission denied")


def test_reader_reports_other_read_errors(tmp_path: Path) -> None:
    (tmp_path / "6" / "cgroup").mkdir(parents=True)  # a directory: EISDIR
    found = ProcAttributor(tmp_path)(6)
    assert found.pod_uid is None
    assert found.reason is not None and found.reason.startswith("cannot read")


def test_cache_reuses_live_pids_and_forgets_gone_ones(tmp_path: Path) -> None:
    _proc(tmp_path, 10, V1_CRIO)
    calls: list[int] = []
    reader = ProcAttributor(tmp_path)

    def counting(pid: int) -> Attribution:
        calls.append(pid)
        return reader(pid)

    cached = CachedAttributor(counting)
    assert cached(10).mapped and cached(10).mapped
    assert calls == [10]
    cached.retain([])  # pid 10 vanished from the sample: a reused PID is looked up again
    cached(10)
    assert calls == [10, 10]


def test_cache_does_not_remember_failures(tmp_path: Path) -> None:
    cached = CachedAttributor(ProcAttributor(tmp_path))
    assert not cached(11).mapped
    _proc(tmp_path, 11, V1_CRIO)
    assert cached(11).mapped

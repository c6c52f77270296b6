"""Node side of headroom: GPU drivers (NVML, simulated), pod attribution and the agent.

Import what you need from here; the submodules are the implementation.
"""

from drivers.agent import Agent, build_report
from drivers.attribution import Attribution, Attributor, CachedAttributor
from drivers.base import GpuDevice, GpuDriver, GpuProcess, Health, MigInstance
from drivers.cgroup import ProcAttributor, pod_from_cgroup
from drivers.cli import add_agent_command
from drivers.leaks import Leak, find_leaks, grants_by_pod
from drivers.simulated import SimulatedDriver, SimulatedOutOfMemory
from drivers.spec import GpuSpec, parse_gpu_spec
from drivers.usage import PodUsage, pod_usage, unattributed_mib

__all__ = [
    "Agent",
    "Attribution",
    "Attributor",
    "CachedAttributor",
    "GpuDevice",
    "GpuDriver",
    "GpuProcess",
    "GpuSpec",
    "Health",
    "Leak",
    "MigInstance",
    "PodUsage",
    "ProcAttributor",
    "SimulatedDriver",
    "SimulatedOutOfMemory",
    "add_agent_command",
    "build_report",
    "find_leaks",
    "grants_by_pod",
    "parse_gpu_spec",
    "pod_from_cgroup",
    "pod_usage",
    "unattributed_mib",
]

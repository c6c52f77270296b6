"""Node side of headroom: GPU drivers (NVML, simulated), pod attribution and the agent.

Import what you need from here; the submodules are the implementation. What the node
shares with the extender (report schema, usage and leak arithmetic, clock, logging, TLS)
is in ``extender.wire``, the only part of ``extender`` this package imports.
"""

from drivers.agent.cli import add_agent_command
from drivers.agent.loop import Agent, build_report
from drivers.attribution.cgroup import ProcAttributor, pod_from_cgroup
from drivers.attribution.pods import Attribution, Attributor, CachedAttributor
from drivers.gpu.base import GpuDevice, GpuDriver, GpuProcess, Health, MigInstance
from drivers.gpu.simulated import SimulatedDriver, SimulatedOutOfMemory
from drivers.gpu.spec import GpuSpec, parse_gpu_spec

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
    "MigInstance",
    "ProcAttributor",
    "SimulatedDriver",
    "SimulatedOutOfMemory",
    "add_agent_command",
    "build_report",
    "parse_gpu_spec",
    "pod_from_cgroup",
]

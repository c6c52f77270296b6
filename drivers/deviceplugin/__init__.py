"""``headroom device-plugin``: the kubelet device plugin that makes a node honour the grant.

The extender decides at bind which GPU(s) a pod gets and writes that on the pod
(``headroom.dev/gpu-uuids``). kubelet's device manager, not the extender, picks the
devices a container receives; this plugin steers that choice to the granted GPUs
(GetPreferredAllocation) and refuses any other (Allocate fails closed), so what the
container sees, what the ledger holds and what is billed are the same GPUs.

A file per idea: ``slots`` (device ids), ``grants`` (which pending pod a request is for;
pure), ``pods`` (reading and acknowledging pods in the API), ``checkpoint`` (answers kept
across kubelet restarts), ``devices`` (slot list and health from the GPU driver),
``service`` (the gRPC DevicePlugin service), ``kubelet`` (registration and re-registration),
``cli`` (the command). ``api`` holds the generated stubs.
"""

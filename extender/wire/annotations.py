"""Pod annotation keys headroom reads and writes: part of its contract with users and
with Kubernetes, so each key is spelled once here.

- read from the pod a user writes: ``ANN_MEMORY`` (GPU memory per GPU, a Kubernetes
  quantity such as ``20Gi``) and ``ANN_CAPACITY`` (``spot|on-demand|any``);
- written at bind and read back when the extender rebuilds its state from the cluster:
  ``ANN_GPU_UUIDS`` (comma-separated GPU or MIG UUIDs) and ``ANN_GPU_MEMORY_MIB``
  (the memory granted per GPU, in MiB);
- written by the node's device plugin: ``ANN_ALLOCATED`` (the slots kubelet's Allocate
  acknowledged for the grant);
- written by the extender when that acknowledgement did not come in time:
  ``ANN_UNACKNOWLEDGED``; and on a pod a node refused while it waited, once it no
  longer waits: ``ANN_REQUEUED``.
"""

from __future__ import annotations

ANN_MEMORY = "headroom.dev/gpu-memory"
ANN_CAPACITY = "headroom.dev/capacity-type"
ANN_GPU_UUIDS = "headroom.dev/gpu-uuids"
ANN_GPU_MEMORY_MIB = "headroom.dev/gpu-memory-mib"
ANN_ALLOCATED = "headroom.dev/allocated"
"""Written by the node's device plugin when kubelet's Allocate for the pod succeeded: the
comma-separated device (slot) ids it acknowledged, ``<GPU-UUID>::<k>``. A grant without it
is bound but not yet admitted on the node."""
ANN_UNACKNOWLEDGED = "headroom.dev/unacknowledged"
"""Written by the extender on a pod whose grant the node's device plugin did not
acknowledge within ``--ack-timeout`` (the time it gave up, RFC 3339). Besides telling a
person, the update is a cluster event: kube-scheduler retries the pods that waited for the
node, which no longer waits (extender/scheduling/acks.py)."""
ANN_REQUEUED = "headroom.dev/requeued"
"""Written by the extender on a pending pod that a device-plugin node refused while a grant
there awaited acknowledgement, once the node no longer waits (the time, RFC 3339). The
update is the cluster event on which kube-scheduler tries the pod again: the event that
ended the wait (the awaited pod deleted, say) may reach kube-scheduler before the
extender, whose filter then refuses the retry, and nothing else would wake the pod for
kube-scheduler's 5-minute requeue."""

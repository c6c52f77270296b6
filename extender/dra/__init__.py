"""Dynamic Resource Allocation (resource.k8s.io/v1) helpers for headroom.

- ``template``: ResourceClaimTemplate / DeviceClass documents (``headroom claim``).
- ``cel``: evaluate DeviceClass and request CEL selectors with cel-python, using the
  activation Kubernetes builds (``device.driver``, ``device.attributes``, ``device.capacity``).
- ``feasibility``: does a claim fit on one node's ResourceSlices (for filtering/scoring).
- ``ingest``: turn an allocated ResourceClaim into ledger ``Decision`` objects.
"""

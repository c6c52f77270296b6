"""kubelet's pod-resources API on the node: what each container actually holds.

``client`` reads it (``List``/``Get`` over the unix socket) for the agent's report;
``api`` holds the generated v1 stubs.
"""

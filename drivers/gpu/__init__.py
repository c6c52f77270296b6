"""GPU drivers: the interface, NVML on a real node, and a simulated GPU for tests and
``headroom simulate``.
"""

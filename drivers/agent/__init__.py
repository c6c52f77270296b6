"""The node agent: its loop (sample, attribute, report), the sender, its own /metrics
and /healthz, and the ``headroom agent`` command.
"""

"""The fast codec: kube-scheduler's request bodies read into the protocol's arguments, and
answers written as bytes, without re-reading what was seen before.

Only the HTTP edge imports this package (an import contract in pyproject.toml).
"""

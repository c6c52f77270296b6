"""The fast codec: kube-scheduler's request bodies read into the protocol's arguments, and
answers written as bytes, without re-reading what was seen before (``Codec``).

Only the HTTP edge imports this package (an import contract in pyproject.toml).
"""

from extender.codec.codec import Codec, MalformedNode

__all__ = ["Codec", "MalformedNode"]

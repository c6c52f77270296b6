"""headroom extender: schedule GPU pods by measured memory headroom and cost, and bill
what they received."""

from extender.wire.version import __version__

__all__ = ["__version__"]

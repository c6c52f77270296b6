"""headroom extender: schedule GPU pods by measured memory headroom and cost, and bill
what they received."""

__version__ = "0.1.0"

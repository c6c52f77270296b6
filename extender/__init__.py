"""headroom extender: schedule GPU pods by measured memory headroom and cost, and bill what they got."""

__version__ = "0.1.0"

"""GPU node prices: what a node's GPUs cost per hour and per GPU-GiB-hour.

The bundled table (``extender/data/prices.json``, generated: docs/pricing.md) is data,
kept apart from the logic (as Karpenter keeps ``zz_generated.pricing_aws.go``); an
override file adds or replaces instance types and spot prices, and may give a $/GPU-hour
fallback by GPU model. Scoring asks a ``PriceBook``, never the table. A node nothing
prices is ``None`` (unpriced), never $0.
"""

from extender.pricing.pricebook import InstancePrice, NodePrice, PriceBook, load_pricebook
from extender.pricing.pricefile import PriceFileError

__all__ = ["InstancePrice", "NodePrice", "PriceBook", "PriceFileError", "load_pricebook"]

"""GPU node prices: what a node's GPUs cost per hour and per GPU-GiB-hour.

The bundled table (``extender/data/prices.json``) is data, kept apart from the logic
(as Karpenter keeps ``zz_generated.pricing_aws.go``); an override file adds or replaces
instance types and spot prices. Scoring asks a ``PriceBook``, never the table.
"""

from extender.pricing.pricebook import InstancePrice, NodePrice, PriceBook, load_pricebook

__all__ = ["InstancePrice", "NodePrice", "PriceBook", "load_pricebook"]

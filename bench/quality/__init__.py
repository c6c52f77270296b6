"""Scheduling quality on traces: the project's own scoring driven through a model of
kube-scheduler's arithmetic, with FGD's "inflation" method. Run ``python -m bench.quality``."""

"""``headroom simulate``: a seeded Karpenter GPU cluster and workload driven through a
real extender over HTTP, the way kube-scheduler drives it."""


class SimulationFailed(RuntimeError):
    """A run could not finish (the extender answered an error, a worker died): the
    command says why in one line and exits 1."""

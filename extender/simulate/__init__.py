"""``headroom simulate``: a seeded Karpenter GPU cluster and workload driven through a
real extender over HTTP, the way kube-scheduler drives it."""

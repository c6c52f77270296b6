"""Cluster state: the GPU inventory (and its columns), node facts, pods seen and bound,
and the workload mix the policies score against.
"""

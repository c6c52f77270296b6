"""The scheduling service: filter, prioritize, bind, preempt, report intake and pod
lifecycle, over the cluster state, scoring and the ledger.
"""

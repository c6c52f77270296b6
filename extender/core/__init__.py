"""Plain data and small utilities every room of the extender stands on: allocation
records, Kubernetes quantities, the one retry policy, the one HTTP client factory, tables.
"""

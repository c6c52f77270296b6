"""Kubernetes edge: API client, the binder, watches that feed inventory and lifecycle."""

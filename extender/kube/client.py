"""The Kubernetes API client (kubeconfig or in-cluster) and what counts as transient."""

from __future__ import annotations

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

TRANSIENT_STATUS = {429, 500, 502, 503, 504}


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client from a kubeconfig file, or the in-cluster ServiceAccount when None."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


def is_transient(e: BaseException) -> bool:
    """Worth retrying: the API server is overloaded, restarting, or unreachable."""
    if isinstance(e, ApiException):
        return e.status in TRANSIENT_STATUS or e.status == 0
    return isinstance(e, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)

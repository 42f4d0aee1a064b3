"""What every part of the Kubernetes backend needs to talk to the API server: a client for
the configured cluster, the errors that mean it does not answer, and reading its answers."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, cast

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from backends.base import BackendError
from backends.kubernetes_settings import KubernetesSettings

# what the client raises when the API server does not answer at all (no HTTP status)
UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
LIST_TIMEOUT = (10, 60)  # seconds to connect, and to read a listing of pods


def api_client(settings: KubernetesSettings) -> k8s.ApiClient:
    """A client for the cluster the settings name: the kubeconfig given, the in-cluster
    service account of a server running in a pod, else the usual kubeconfig."""
    configuration = k8s.Configuration()
    try:
        if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=settings.kubeconfig,
                context=settings.context,
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise BackendError(
            f"no usable Kubernetes configuration ({where}, not running in a cluster): {exc}"
        ) from None
    return k8s.ApiClient(configuration)


def response_body(response: Any) -> dict[str, Any]:
    """The JSON body of a response asked for with `_preload_content=False`: a raw urllib3
    response, which the client's annotations do not know of. The API server answers objects
    (resources, lists, Status); anything else is refused as bad JSON is, with a ValueError."""
    body = json.loads(response.data)
    if not isinstance(body, dict):
        raise ValueError(f"the API server answered JSON that is not an object: {body!r:.200}")
    return body


def quota_not_counted(exc: ApiException) -> bool:
    """A ResourceQuota's refusal before the quota controller first counted its usage: it
    passes once the quota has a status (seconds after the quota is made)."""
    return exc.status == 403 and "status unknown for quota" in api_message(exc)


def api_message(exc: ApiException) -> str:
    """The API server's own message, else the HTTP reason."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):  # not a JSON object
        body = json.loads(cast(str, exc.body))
        if body.get("message"):
            return str(body["message"])
    return f"{exc.status} {exc.reason}".strip()

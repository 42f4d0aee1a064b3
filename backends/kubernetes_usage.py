"""What the pods of a Kubernetes attempt use, from the cluster's metrics API.

`metrics.k8s.io/v1beta1` PodMetrics (served by metrics-server or an adapter) gives each
container's CPU and memory now; it has no network or GPU figures, so those stay at zero and
None. A cluster without the API (404) or a role without the right to read it (403) measures
nothing, and the source says which.
"""

from __future__ import annotations

import re
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
SOURCE = "metrics.k8s.io (the cluster's metrics API): CPU and memory, no network or GPU figures"
NO_METRICS_API = (
    "not measured: the cluster serves no metrics API (metrics.k8s.io); install metrics-server"
)
_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 1024.0,
    "Mi": 1024.0**2,
    "Gi": 1024.0**3,
    "Ti": 1024.0**4,
    "Pi": 1024.0**5,
    "Ei": 1024.0**6,
}


def quantity(text: str) -> float:
    """A Kubernetes quantity ("250m", "12345n", "100Mi", "1.5G") as a number; ValueError
    naming it otherwise."""
    found = _QUANTITY.match(text.strip())
    if found is None or found.group(2) not in _SUFFIX:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    return float(found.group(1)) * _SUFFIX[found.group(2)]


def pod_figures(item: dict[str, Any]) -> tuple[float, int]:
    """(cores, memory bytes) of one PodMetrics, summed over its containers."""
    cores = 0.0
    memory = 0.0
    for container in item.get("containers") or []:
        usage = container.get("usage") or {}
        cores += quantity(str(usage.get("cpu", "0")))
        memory += quantity(str(usage.get("memory", "0")))
    return cores, int(memory)


class PodMetricsReader:
    """Lists the PodMetrics of the backend's pods in its namespace, or in every namespace
    (`every_namespace`: one namespace per virtual cluster)."""

    def __init__(
        self, api: k8s.ApiClient, namespace: str, selector: str, every_namespace: bool = False
    ) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.namespace = namespace
        self.every_namespace = every_namespace
        self.selector = selector
        self.source = SOURCE

    def read(self) -> dict[str, tuple[float, int]]:
        """Pod name -> (cores, memory bytes); empty (the source says why) when the cluster
        cannot tell."""
        try:
            if self.every_namespace:
                listing = self.custom.list_cluster_custom_object(
                    GROUP, VERSION, "pods", label_selector=self.selector, _request_timeout=10
                )
            else:
                listing = self.custom.list_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    "pods",
                    label_selector=self.selector,
                    _request_timeout=10,
                )
        except ApiException as exc:
            if exc.status == 404:
                self.source = NO_METRICS_API
            elif exc.status == 403:
                self.source = (
                    "not measured: the server may not list pods.metrics.k8s.io in "
                    + ("every namespace" if self.every_namespace else repr(self.namespace))
                    + " (see deploy/kubernetes)"
                )
            else:
                self.source = f"not measured: the metrics API answered {exc.status} {exc.reason}"
            return {}
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.source = f"not measured: the metrics API does not answer ({exc})"
            return {}
        self.source = SOURCE
        figures: dict[str, tuple[float, int]] = {}
        items: list[dict[str, Any]] = (
            listing.get("items") or [] if isinstance(listing, dict) else []
        )
        for item in items:
            name = str((item.get("metadata") or {}).get("name", ""))
            try:
                figures[name] = pod_figures(item)
            except ValueError:
                continue  # a quantity no API server writes; the pod is left unmeasured
        return figures

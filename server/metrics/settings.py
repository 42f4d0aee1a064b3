"""The settings of the Prometheus endpoint, read from the environment when the app is made.

PAIGRAPH_METRICS_OPEN, PAIGRAPH_METRICS_PER_INSTANCE and PAIGRAPH_METRICS_MAX_INSTANCES, with
their defaults and why one would change them: docs/configuration.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

OPEN_ENV = "PAIGRAPH_METRICS_OPEN"
PER_INSTANCE_ENV = "PAIGRAPH_METRICS_PER_INSTANCE"
MAX_INSTANCES_ENV = "PAIGRAPH_METRICS_MAX_INSTANCES"
DEFAULT_MAX_INSTANCES = 2000

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class MetricsSettings:
    open: bool = False
    per_instance: bool = True
    max_instances: int = DEFAULT_MAX_INSTANCES


def metrics_settings(environ: Mapping[str, str] | None = None) -> MetricsSettings:
    """The settings from `environ` (else the process's environment); ValueError naming the
    setting and what it takes when one is malformed."""
    env = os.environ if environ is None else environ
    return MetricsSettings(
        open=_flag(env, OPEN_ENV, default=False),
        per_instance=_flag(env, PER_INSTANCE_ENV, default=True),
        max_instances=_count(env, MAX_INSTANCES_ENV, default=DEFAULT_MAX_INSTANCES),
    )


def _flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {env[name]!r}")


def _count(env: Mapping[str, str], name: str, *, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{name} must be a whole number of 0 or more, got {env[name]!r}")
    return count

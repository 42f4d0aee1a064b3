"""The Prometheus endpoint, GET /metrics: settings (`settings`), who may read it (`access`),
the instruments fed where things happen (`jobs`, `api`), what is read at each scrape
(`scrape`) and one registry per app (`registry`). See docs/metrics.md."""

from server.metrics.endpoint import metrics_endpoint
from server.metrics.registry import AppMetrics
from server.metrics.settings import MetricsSettings, metrics_settings

__all__ = ["AppMetrics", "MetricsSettings", "metrics_endpoint", "metrics_settings"]

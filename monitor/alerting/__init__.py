"""Alert delivery at the edge: the Alertmanager client (stdlib only, so the embedded demo needs nothing
more). Which alerts fire, and when they resolve, is decided in the pure core
(:mod:`monitor.core.canary.alerts`)."""

from monitor.alerting.alertmanager import AlertmanagerClient, postable

__all__ = ["AlertmanagerClient", "postable"]

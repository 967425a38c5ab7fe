"""Exporting the stream's state: bounded label values, and a Prometheus collector computed at scrape time."""

"""The Kafka worker: Faust agents, Redis state, HTTP endpoints (see docs/worker.md)."""

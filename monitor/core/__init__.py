"""The pure metric core: grade scales, per-list metrics, measures and mergeable aggregates.

Nothing here imports faust, redis, aiokafka or prometheus_client, and nothing reads the clock.
"""

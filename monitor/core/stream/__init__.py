"""The stream's pure core: configuration, per-session statistics, windows, the query-frequency sketch,
sampling and the join state machine. Adapters (in-process for the demo, Redis + Faust for the worker) load
the state a step needs, call :func:`monitor.core.stream.join.step`, and commit its transition atomically."""

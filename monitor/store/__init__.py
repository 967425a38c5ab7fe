"""Adapters that run the stream core: in-process state (the demo, replays, tests of the core) and, beside
it, Redis state driven by Faust agents (the worker)."""

"""Helpers shared by the tests and the benchmarks: stream generators, brute-force references, the worker
harness, service helpers.

Nothing here is a test: test modules and benchmarks import their helpers from here, never from a test module.
"""

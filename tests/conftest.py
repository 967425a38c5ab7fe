"""Test-session wiring: the real-service fixtures live in ``tests/fixtures/services.py``."""

pytest_plugins = ["tests.fixtures.services"]

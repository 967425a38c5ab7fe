"""Unit, property and merge tests of the pure core (no services)."""

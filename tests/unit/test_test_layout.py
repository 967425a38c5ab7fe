"""Shared test and benchmark helpers live in ``tests/support/``: no test module imports another.

A helper that two test modules need belongs in ``tests/support/`` (or, for a service fixture, in
``tests/fixtures/``), not in one of the test modules: importing a test module from another runs all of
it, ties the two modules' constants together by accident and hides what is shared. The benchmarks may use
the shared helpers and fixtures, but not the tests themselves.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BENCHMARKS = ROOT / "benchmarks"


def imported_modules(path: Path, source: str | None = None) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports (anywhere in it, functions included), absolute, with its line;
    ``source``: the text of ``path`` if not the file's."""
    package = ".".join(path.relative_to(ROOT).parent.parts)
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # ``from tests.unit import test_x`` imports the module test_x
                yield node.lineno, f"{module}.{alias.name}"


def is_test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") for part in parts[1:])


def test_the_check_sees_every_form_of_import() -> None:
    source = ("import tests.unit.test_a\n"
              "from tests.integration.test_b import helper\n"
              "from tests.unit import test_c\n"
              "from .test_d import helper\n"
              "from . import test_e\n"
              "def later():\n"
              "    from tests.unit.test_f import helper\n"
              "from tests.support.streams import impression\n")
    found = {module for _, module in imported_modules(TESTS / "integration" / "test_x.py", source)
             if is_test_module(module) and not module.endswith(".helper")}
    assert found == {"tests.unit.test_a", "tests.integration.test_b", "tests.unit.test_c",
                     "tests.integration.test_d", "tests.integration.test_e", "tests.unit.test_f"}
    assert not is_test_module("tests.support.streams") and not is_test_module("monitor.test_like")


def test_no_test_module_imports_another_test_module() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for line, module in imported_modules(path)
                 if is_test_module(module)]
    assert offenders == [], "move the shared helpers to tests/support/ and import them from there"


def test_benchmarks_import_only_the_shared_test_helpers() -> None:
    paths = sorted(BENCHMARKS.rglob("*.py"))
    assert paths, BENCHMARKS
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in paths
                 for line, module in imported_modules(path)
                 if module.split(".")[0] == "tests"
                 and module.split(".")[:2] not in (["tests", "support"], ["tests", "fixtures"])]
    assert offenders == [], "benchmarks may import tests.support and tests.fixtures, not the tests"

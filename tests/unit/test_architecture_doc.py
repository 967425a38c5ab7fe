"""docs/architecture.md against the tree, and the import graph of ``monitor/`` (issue 16).

The page names code in backticks, by one rule (stated on the page, under "The rooms"):

* a code span with a ``/`` and no spaces is a path from the repository root: ``monitor/core/events.py``
  (a file), ``monitor/core/stream/`` (a folder), or ``monitor/core/stream/join.step`` (the top-level name
  ``step`` of ``monitor/core/stream/join.py``);
* in a table row whose first cell is a folder, a bare name (a file, ``gain.py``, or one folder,
  ``local/``) is in that folder; a bare name anywhere else names nothing and is an error.

The import graph is read with :mod:`ast` from every module's source, so it includes imports under
``if TYPE_CHECKING:`` and inside functions (a deferred import still ties two modules together); relative
imports are resolved against the importing module's package. Modules imported by name at run time
(``importlib.import_module`` in ``monitor/cli.py``) are not edges: nothing imports them back. From that
graph: no cycle between modules, nor between the page's rooms (packages, but the modules directly in
``monitor/`` and ``monitor/core/`` one by one, as the page's rows have them); the page's "imports" column
is what each row's modules import; and ``monitor/core`` imports only the standard library, numpy and
itself.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = "monitor"

CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]*)+")
BARE_FILE = re.compile(r"[\w.-]+\.py")
BARE_FOLDER = re.compile(r"[\w.-]+/")

# What the pure core may import: the standard library, numpy, msgspec (schema-driven decoding of bytes
# already read, no I/O) and itself (STYLE.md, "A pure core").
CORE = "monitor.core"
CORE_MAY_IMPORT = {"numpy", "msgspec"}


# ---- the page ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A path the page names, where (line number) and as written."""

    line: int
    written: str
    path: str  # from the repository root, as written or joined with the row's folder


def references(text: str) -> list[Reference]:
    """Every path the page names, by the rule of the module docstring; a bare name outside a folder's row
    is an error (it names nothing unambiguously)."""
    found: list[Reference] = []
    for number, line in enumerate(text.splitlines(), start=1):
        spans = CODE_SPAN.findall(line)
        folder: str | None = None
        if line.startswith("|"):
            first = CODE_SPAN.findall(line.split("|")[1])
            if first and first[0].endswith("/"):
                folder = first[0]
        for index, span in enumerate(spans):
            row_path = index == 0 and line.startswith("|")  # a row's first cell is from the root
            if (BARE_FILE.fullmatch(span) or BARE_FOLDER.fullmatch(span)) and not row_path:
                if folder is None:
                    raise AssertionError(f"docs/architecture.md:{number}: bare name `{span}` outside "
                                         "a folder's row: write its path from the repository root")
                found.append(Reference(number, span, folder + span))
            elif PATH.fullmatch(span):
                found.append(Reference(number, span, span))
    return found


def top_level_names(source: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing(reference: Reference, root: Path = ROOT) -> str | None:
    """Why the path does not exist (None when it does)."""
    target = root / reference.path
    if reference.path.endswith("/"):
        return None if target.is_dir() else "no such folder"
    if target.exists():
        return None
    if reference.path.endswith(".py"):
        return "no such file"
    stem, dot, name = target.name.partition(".")
    module = target.with_name(stem + ".py")
    if not dot or not module.is_file():
        return "no such file or module"
    return None if name in top_level_names(module) else f"{module.relative_to(root)} defines no {name!r}"


def named(text: str) -> set[str]:
    """The paths the page names, files and folders (a module.name reference names its module)."""
    paths: set[str] = set()
    for reference in references(text):
        path = reference.path
        last = path.rsplit("/", 1)[-1]
        if not path.endswith("/") and not last.endswith(".py") and "." in last:
            path = path.rsplit("/", 1)[0] + "/" + last.split(".")[0] + ".py"
        paths.add(path)
    return paths


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    refs = references(text)
    assert len(refs) > 100, "the parse rule found almost nothing: has the page's notation changed?"
    wrong = [f"docs/architecture.md:{r.line}: `{r.written}` ({r.path}): {why}"
             for r in refs if (why := missing(r)) is not None]
    assert not wrong, "\n".join(wrong)


def test_every_package_and_module_is_named() -> None:
    names = named(PAGE.read_text(encoding="utf-8"))
    packages = sorted(f"{p.parent.relative_to(ROOT).as_posix()}/" for p in (ROOT / PACKAGE).rglob("__init__.py")
                      if p.parent != ROOT / PACKAGE)
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.py")
                   if p.name != "__init__.py")
    assert packages and files
    unnamed = [path for path in packages + files if path not in names]
    assert not unnamed, "docs/architecture.md does not name: " + ", ".join(unnamed)


def test_the_parse_rule_rejects_what_it_should() -> None:
    page = "\n".join([
        "| `monitor/core/metrics/` | `gain.py`, `nothing.py` | numpy |",
        "| `deploy/` | `prometheus/`, `nowhere/` | |",
        "| `monitor/core/stream/join.step` | `monitor/core/stream/join.nothing`, `monitor/nowhere/` | |",
        "`deploy/prometheus/rules/` and `/metrics` and `POST /deploys` and `srm:{p<N>}:meta`",
    ])
    refs = references(page)
    assert [r.path for r in refs] == [
        "monitor/core/metrics/", "monitor/core/metrics/gain.py", "monitor/core/metrics/nothing.py",
        "deploy/", "deploy/prometheus/", "deploy/nowhere/",
        "monitor/core/stream/join.step", "monitor/core/stream/join.nothing", "monitor/nowhere/",
        "deploy/prometheus/rules/"]
    assert [missing(r) for r in refs] == [
        None, None, "no such file",
        None, None, "no such folder",
        None, "monitor/core/stream/join.py defines no 'nothing'", "no such folder",
        None]
    with pytest.raises(AssertionError, match=r"bare name `gain\.py` outside"):
        references("see `gain.py`")
    with pytest.raises(AssertionError, match="bare name `local/` outside"):
        references("| `monitor/cli.py` | `local/` | |")


# ---- the import graph ----------------------------------------------------------------------------


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (source file, is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for source in sorted((root / package).rglob("*.py")):
        parts = list(source.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (source, is_package)
    return found


def imported_names(name: str, source: Path, is_package: bool) -> set[str]:
    """Every dotted name a module imports, anywhere in its source (``from a import b`` gives ``a`` and
    ``a.b``: ``b`` may be a submodule); relative imports resolved."""
    here = name if is_package else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"), str(source))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def import_graph(found: Mapping[str, tuple[Path, bool]]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module → the package's modules it imports, module → every dotted name it imports)."""
    graph: dict[str, set[str]] = {}
    raw: dict[str, set[str]] = {}
    for name, (source, is_package) in found.items():
        raw[name] = imported_names(name, source, is_package)
        targets: set[str] = set()
        for imported in raw[name]:
            while imported and imported not in found:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph, raw


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of the directed graph as [a, b, …, a], or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        colour[start] = GREY
        while stack:
            node = next(stack[-1], None)
            if node is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour.get(node, BLACK) == GREY:
                return [*path[path.index(node):], node]
            elif colour.get(node) == WHITE:
                colour[node] = GREY
                path.append(node)
                stack.append(iter(sorted(graph[node])))
    return None


def package_of(name: str, found: Mapping[str, tuple[Path, bool]]) -> str:
    return name if found[name][1] else name.rpartition(".")[0]


def room_of(name: str, found: Mapping[str, tuple[Path, bool]], split: Collection[str] = ()) -> str:
    """The room of a module: its package, except for a module directly in one of the ``split`` packages,
    which is a room of its own."""
    package = package_of(name, found)
    return name if package in split and not found[name][1] else package


def package_graph(graph: Mapping[str, set[str]], found: Mapping[str, tuple[Path, bool]],
                  split: Collection[str] = ()) -> dict[str, set[str]]:
    """The module graph collapsed onto rooms (:func:`room_of`: packages, i.e. folders, but the modules
    directly in a ``split`` package one by one), edges within a room left out."""
    rooms: dict[str, set[str]] = {room_of(name, found, split): set() for name in found}
    for name, targets in graph.items():
        here = room_of(name, found, split)
        rooms[here].update(room for room in (room_of(t, found, split) for t in targets) if room != here)
    return rooms


FOUND = modules()
GRAPH, RAW = import_graph(FOUND)
# The packages whose modules are rooms of their own, each with its row on the page, as a subpackage is.
ROOMS_BY_MODULE = frozenset({PACKAGE, CORE})


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    sources = {
        "p/__init__.py": "from p.a import thing\n",
        "p/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B\nthing = 1\n",
        "p/b.py": "def f():\n    from .sub import c\n    import numpy\n",
        "p/sub/__init__.py": "",
        "p/sub/c.py": "from .. import a\nfrom ..b import f\nimport p.sub\n",
    }
    for path, text in sources.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    found = modules(tmp_path, "p")
    graph, raw = import_graph(found)
    assert graph == {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p.sub", "p.sub.c"}, "p.sub": set(),
                     "p.sub.c": {"p", "p.a", "p.b", "p.sub"}}
    assert "numpy" in raw["p.b"]
    assert find_cycle(graph) == ["p", "p.a", "p.b", "p.sub.c", "p"]
    assert find_cycle(package_graph(graph, found)) == ["p", "p.sub", "p"]
    assert len(FOUND) > 100 and "monitor.core.stream.join" in GRAPH["monitor.store.memory"]


def test_no_import_cycle_between_rooms() -> None:
    """The rooms are the page's rows: each package, but each module directly in ``monitor/`` or
    ``monitor/core/`` on its own (``monitor/core/evaluation.py`` may import ``monitor/core/measures/``,
    whose modules import ``monitor/core/judged.py``, as long as no import leads back)."""
    cycle = find_cycle(package_graph(GRAPH, FOUND, ROOMS_BY_MODULE))
    assert cycle is None, "import cycle between rooms: " + " → ".join(cycle or [])


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle between modules: " + " → ".join(cycle or [])


def row_imports(path: str, graph: Mapping[str, set[str]], raw: Mapping[str, set[str]]) -> set[str]:
    """What the page's "imports" column should say for a row of ``monitor/``: the parts of the package
    (``core`` for anything in monitor/core, else the subpackage's name) and the third-party libraries
    that the row's modules import, besides the standard library and the row itself. The root package's
    ``__init__`` (``__version__``) is left out."""
    row = path.rstrip("/").removesuffix(".py").replace("/", ".")
    names: set[str] = set()
    for name in (m for m in graph if m == row or (path.endswith("/") and m.startswith(row + "."))):
        for module in graph[name]:
            if not (module in (row, PACKAGE) or module.startswith(row + ".")):
                names.add("core" if module == CORE or module.startswith(CORE + ".") else module.split(".")[1])
        names.update(top for top in (imported.split(".")[0] for imported in raw[name])
                     if top not in sys.stdlib_module_names and top not in {"__future__", PACKAGE})
    return names


def test_the_imports_column_is_what_each_row_imports() -> None:
    wrong = []
    rows = 0
    for number, line in enumerate(PAGE.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.startswith(f"| `{PACKAGE}/"):
            continue
        rows += 1
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        path = CODE_SPAN.findall(cells[0])[0]
        written = set() if cells[-1] in {"—", ""} else {
            re.sub(r"\s*\(.*?\)", "", part).strip() for part in cells[-1].split(",")}
        actual = row_imports(path, GRAPH, RAW)
        if written != actual:
            wrong.append(f"docs/architecture.md:{number}: {path} imports {', '.join(sorted(actual)) or '—'}; "
                         f"the page says {cells[-1]}")
    assert rows >= 15, "no rows of monitor/ found: has the table's layout changed?"
    assert not wrong, "\n".join(wrong)


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": set(), "b": {"c", "a"}, "c": {"b"}}) == ["b", "c", "b"]
    found = {"p": (Path(), True), "p.x": (Path(), False), "q": (Path(), True), "q.y": (Path(), False)}
    assert find_cycle(package_graph({"p": set(), "p.x": {"q.y"}, "q": set(), "q.y": {"p"}}, found)) == [
        "p", "q", "p"]
    # p.x → q.y → p.z: a cycle between the packages p and q, none between the rooms when p's modules are
    # rooms of their own; p.x → q.y → p.x is one in both
    found |= {"p.z": (Path(), False)}
    through = {"p": set(), "p.x": {"q.y"}, "p.z": set(), "q": set(), "q.y": {"p.z"}}
    assert find_cycle(package_graph(through, found)) == ["p", "q", "p"]
    assert find_cycle(package_graph(through, found, {"p"})) is None
    assert find_cycle(package_graph(through | {"q.y": {"p.x"}}, found, {"p"})) == ["p.x", "q", "p.x"]


def test_the_core_imports_no_adapter() -> None:
    """``monitor/core`` imports only the standard library, numpy and itself: no monitor.worker,
    monitor.store, monitor.export, redis, aiokafka, faust, prometheus_client or aiohttp."""
    wrong = sorted(
        f"{name} imports {imported}"
        for name, names in RAW.items() if name == CORE or name.startswith(CORE + ".")
        for imported in names
        if not (imported == CORE or imported.startswith(CORE + ".") or imported == "__future__"
                or imported.split(".")[0] in sys.stdlib_module_names
                or imported.split(".")[0] in CORE_MAY_IMPORT))
    assert not wrong, "\n".join(wrong)

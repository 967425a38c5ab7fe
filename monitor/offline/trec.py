"""TREC ``qrels`` (``qid iter docno grade``) and ``run`` (``qid Q0 docno rank score tag``) files.

Parsed with pyarrow's multi-threaded CSV reader (fields separated by runs of blanks or tabs, as trec_eval
accepts). When the fast reader rejects a file, a line-by-line validator finds the first bad line and
raises :class:`InputError` with file, line and reason. Rules (as trec_eval, unless noted):

* run: 6 fields; the score must be a finite number (trec_eval would take ``nan``: we refuse it); the rank
  field is ignored; a document twice for one query is an error (trec_eval refuses it too);
* qrels: 4 fields; the grade must be on the scale; a document judged twice for one query is an error
  (trec_eval keeps one silently: we make you choose).

Repeated documents are found by :func:`monitor.offline.trec_batch.batch_from_trec`, which sorts the qrels
and the run together once (qrels repeats are reported first), and named by file and line here; when the
run is malformed, :func:`check_judged_once` keeps a qrels repeat the first error reported.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pacsv

from monitor.core.errors import GradeError
from monitor.core.grades import Scale, TrecScale
from monitor.offline.errors import InputError

RUN_FIELDS = ("qid", "q0", "docno", "rank", "score", "tag")
QRELS_FIELDS = ("qid", "iter", "docno", "grade")
_BLANKS = re.compile(rb"[ \t\r\f\v]+")
_EDGES = re.compile(rb"(?m)^ | $")

FloatArray = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Qrels:
    """Judgments: one row per (query, document); query ids as indices into ``queries``, grades as indices
    into the ``grade_*`` tables (one entry per distinct grade written in the file)."""

    queries: pa.Array
    query_index: IndexArray
    docno: pa.ChunkedArray
    grade: IndexArray
    grade_gains: FloatArray
    grade_levels: FloatArray
    grade_relevant: FloatArray
    max_level: float
    path: Path | None = None  # named in errors found later (a document judged twice for one query)

    @property
    def gains(self) -> FloatArray:
        return self.grade_gains[self.grade]

    @property
    def relevant(self) -> FloatArray:
        return self.grade_relevant[self.grade]


@dataclass(frozen=True)
class Run:
    """A run: one row per retrieved (query, document); query ids as indices into ``queries``."""

    queries: pa.Array
    query_index: IndexArray
    docno: pa.ChunkedArray
    scores: FloatArray
    path: Path | None = None  # named in errors found later (a document twice for one query)


def _normalise(data: bytes) -> bytes:
    """Single spaces between fields, none at line ends."""
    return _EDGES.sub(b"", _BLANKS.sub(b" ", data))


def _pool() -> pa.MemoryPool:
    """The C library's malloc, not pyarrow's default mimalloc: mimalloc backs its segments with
    transparent huge pages (94 faults of 2 MiB per benchmark run), whose faults zero 2 MiB each and, when
    memory is fragmented, wait for the kernel to compact it: up to 0.2 s more system time per run on the
    2-core machine, and 20-65 MiB more peak RSS. With malloc, numpy's arrays reuse what the parser
    frees (docs/evaluate.md)."""
    return pa.system_memory_pool()


def _parse(source: pa.NativeFile | io.BytesIO, fields: tuple[str, ...],
           types: dict[str, pa.DataType]) -> pa.Table:
    return pacsv.read_csv(
        source,
        read_options=pacsv.ReadOptions(column_names=list(fields), use_threads=True, block_size=1 << 20),
        parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False, escape_char=False,
                                         double_quote=False, newlines_in_values=False),
        convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types),
                                             strings_can_be_null=False, quoted_strings_can_be_null=False),
        memory_pool=_pool(),
    )


def _has_tab(path: Path) -> bool:
    """Whether the file has a tab anywhere (a memchr over a read-only mapping: no copy of the text)."""
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return False
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return view.find(b"\t") >= 0


def _read_table(path: Path, fields: tuple[str, ...], types: dict[str, pa.DataType]) -> pa.Table:
    """Parse with single-space separators; if that fails, or the file has tabs, normalise blanks first.

    The fast path streams the file into the parser, so the text is never held whole next to the table.
    """
    return _parse_file(path, fields, types)


def _parse_file(path: Path, fields: tuple[str, ...], types: dict[str, pa.DataType]) -> pa.Table:
    if not _has_tab(path):
        try:
            with pa.OSFile(str(path), memory_pool=_pool()) as source:
                return _parse(source, fields, types)
        except pa.ArrowInvalid:
            pass
    return _parse(io.BytesIO(_normalise(path.read_bytes())), fields, types)


def _indexed(column: pa.ChunkedArray) -> tuple[pa.Array, IndexArray]:
    """(distinct values, index of each row) of a dictionary-typed column."""
    unified = column.unify_dictionaries(_pool())
    if unified.num_chunks == 0:
        return pa.array([], pa.string()), np.zeros(0, dtype=np.int32)
    indices = [chunk.indices.to_numpy(zero_copy_only=False) for chunk in unified.chunks]
    return unified.chunk(0).dictionary, np.concatenate(indices).astype(np.int32, copy=False)


DICT = pa.dictionary(pa.int32(), pa.string())


def _scan(path: Path, fields: tuple[str, ...], check: Callable[[list[str]], str | None]) -> None:
    """Find the first bad line of a file the fast reader refused; raise InputError for it."""
    empty, lines = True, 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            lines = number
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark first
            except UnicodeDecodeError as error:
                raise InputError(str(path), number, f"not UTF-8 ({error.reason} at byte {error.start})") \
                    from None
            parts = line.split()
            if not parts:
                continue
            empty = False
            if len(parts) != len(fields):
                raise InputError(str(path), number, f"expected {len(fields)} fields "
                                 f"({' '.join(fields)}), got {len(parts)}")
            reason = check(parts)
            if reason is not None:
                raise InputError(str(path), number, reason)
    if empty:
        what = "the file is empty" if lines == 0 else f"the file has only blank lines ({lines})"
        raise InputError(str(path), None, f"{what}: expected lines of {len(fields)} fields "
                                          f"({' '.join(fields)})")
    raise InputError(str(path), None, "unreadable (no single bad line found)")


def first_line_where(path: Path, predicate: Callable[[list[str]], bool], reason: str) -> InputError:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            parts = raw.decode("utf-8", "replace").split()
            if parts and predicate(parts):
                return InputError(str(path), number, reason.format(*parts))
    return InputError(str(path), None, reason.format(*([""] * 6)))


def check_judged_once(qrels: Qrels) -> None:
    """Raise the error for a document judged twice for one query, if any (sorts the qrels on their own).

    The join finds such repeats in its sort; this is for when the join never runs because the run is
    malformed, so that the qrels error is still the one reported first, as the qrels are read first.
    """
    import pyarrow.compute as pc  # here only: the import costs 30 ms, and this runs on errors only

    if len(qrels.docno) < 2:
        return
    docno = qrels.docno.combine_chunks()
    order = pc.sort_indices(pa.table({"q": qrels.query_index, "d": docno}),
                            sort_keys=[("q", "ascending"), ("d", "ascending")])
    ordered = docno.take(order)
    queries = qrels.query_index[np.asarray(order)]
    same = np.asarray(pc.equal(ordered[1:], ordered[:-1])) & (queries[1:] == queries[:-1])
    if same.any():
        raise repeated_document(qrels.path or Path("qrels"), "judged")


def repeated_document(path: Path, what: str) -> InputError:
    """The error for the first line that repeats an earlier line's (query, document)."""
    seen: set[tuple[str, str]] = set()

    def repeated(parts: list[str]) -> bool:
        key = (parts[0], parts[2])
        if key in seen:
            return True
        seen.add(key)
        return False

    return first_line_where(path, repeated, f"document {{2}} {what} twice for query {{0}}")


def read_run(path: str | Path) -> Run:
    path = Path(path)
    try:
        table = _read_table(path, RUN_FIELDS, {"qid": DICT, "docno": pa.string(), "score": pa.float64()})
    except (pa.ArrowInvalid, UnicodeDecodeError):
        _scan(path, RUN_FIELDS, _check_run_fields)
        raise  # pragma: no cover - _scan always raises
    if table.num_rows == 0:  # nothing but blank lines: the fast reader takes them as no rows
        _scan(path, RUN_FIELDS, _check_run_fields)
    scores = np.concatenate([chunk.to_numpy(zero_copy_only=False) for chunk in table["score"].chunks]
                            or [np.zeros(0)])  # a null (an empty field) becomes nan, refused below
    if not np.isfinite(scores).all():
        raise first_line_where(path, lambda p: not math.isfinite(float(p[4])),
                                "score {4!r} of document {2} is not a finite number")
    queries, query_index = _indexed(table["qid"])
    return Run(queries, query_index, table["docno"], scores, path)  # chunks: the join copies them once


def _check_run_fields(parts: list[str]) -> str | None:
    try:
        score = float(parts[4])
    except ValueError:
        return f"score {parts[4]!r} is not a number"
    if not math.isfinite(score):
        return f"score {parts[4]!r} is not a finite number"
    return None


def read_qrels(path: str | Path, scale: Scale) -> Qrels:
    path = Path(path)
    try:
        table = _read_table(path, QRELS_FIELDS, {"qid": DICT, "docno": pa.string(), "grade": DICT})
    except (pa.ArrowInvalid, UnicodeDecodeError):
        _scan(path, QRELS_FIELDS, lambda parts: _check_grade(parts[3], scale))
        raise  # pragma: no cover
    if table.num_rows == 0:  # nothing but blank lines: the fast reader takes them as no rows
        _scan(path, QRELS_FIELDS, lambda parts: _check_grade(parts[3], scale))
    names, grade_index = _indexed(table["grade"])
    gains, levels, relevant = [], [], []
    for name in names.to_pylist():
        try:
            grade = scale.parse(name)
        except GradeError as error:
            raise first_line_where(path, _grade_is(name), str(error)) from None
        gains.append(grade.gain)
        levels.append(float(grade.level))
        relevant.append(1.0 if grade.relevant else 0.0)
    queries, query_index = _indexed(table["qid"])
    level_table = np.asarray(levels, dtype=np.float64)  # every grade in the table occurs in the file
    if isinstance(scale, TrecScale):
        max_level = float(scale.max_level if scale.max_level is not None
                          else max(level_table.max(initial=0.0), 0.0))
    else:
        max_level = float(scale.max_level)
    return Qrels(queries, query_index, table["docno"], grade_index, np.asarray(gains, dtype=np.float64),
                 level_table, np.asarray(relevant, dtype=np.float64), max_level, path)


def _grade_is(name: str) -> Callable[[list[str]], bool]:
    return lambda parts: parts[3] == name


def _check_grade(value: str, scale: Scale) -> str | None:
    try:
        scale.parse(value)
    except GradeError as error:
        return str(error)
    return None

"""``ByteStrings`` (hashes, equality, byte order of many strings at once) against plain Python bytes.

Random strings of 0..40 bytes (so words end at every offset, and some strings are prefixes of others,
or differ only by trailing zero bytes), split into several parts as Arrow chunks are; every pair is
compared to ``bytes`` equality and ``sorted`` on bytes, and equal strings must hash alike.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.offline.byte_strings import ByteStrings, equal
from monitor.offline.trec_batch import byte_strings

# Few distinct bytes so that equal strings, shared prefixes and trailing zeros are common.
STRINGS = st.lists(st.binary(max_size=40).map(lambda b: bytes(x % 3 for x in b)) | st.sampled_from(
    [b"", b"\x00", b"a", b"a\x00", b"abcdefgh", b"abcdefgh\x00", b"abcdefghi"]) | st.builds(
    lambda at, byte: b"p" * at + bytes([byte]) + b"s", st.integers(0, 24), st.integers(0, 2)),
    min_size=1, max_size=60)  # the last: equal but for byte `at` (any byte of a word, of a pass)


def parts(values: list[bytes], cuts: list[int]) -> ByteStrings:
    """The strings in Arrow layout, split into parts at ``cuts``, each part's data with an offset."""
    bounds = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    pieces = []
    for low, high in itertools.pairwise(bounds):
        chunk = values[low:high]
        offsets = np.cumsum([3] + [len(v) for v in chunk]).astype(np.int32)  # data starts at byte 3
        data = np.frombuffer(b"xyz" + b"".join(chunk) + b"tail", dtype=np.uint8)
        pieces.append((offsets, data))
    return ByteStrings.from_parts(pieces)


@settings(max_examples=300, deadline=None)
@given(STRINGS, st.lists(st.integers(0, 60), max_size=4))
def test_equality_hashes_and_byte_order_match_python_bytes(values: list[bytes], cuts: list[int]) -> None:
    strings = parts(values, cuts)
    assert len(strings) == len(values)
    n = len(values)
    a, b = (index.ravel() for index in np.meshgrid(np.arange(n), np.arange(n)))
    expected = [values[i] == values[j] for i, j in zip(a.tolist(), b.tolist(), strict=True)]
    assert equal(strings, a, strings, b).tolist() == expected
    keys = strings.keys(np.zeros(n, dtype=np.int32), 1)
    for i, j, same in zip(a.tolist(), b.tolist(), expected, strict=True):
        if same:
            assert keys[i] == keys[j]
    rows = np.arange(n)
    order = strings.descending_within(rows, np.zeros(n, dtype=np.int64))
    assert [values[i] for i in order.tolist()] == sorted(values, reverse=True)
    groups = np.repeat(np.arange(3), [n // 3, n // 3, n - 2 * (n // 3)])  # three groups of positions
    within = strings.descending_within(rows, groups).tolist()
    expected = [i for g in range(3) for i in sorted(np.flatnonzero(groups == g).tolist(),
                                                         key=lambda i: values[i], reverse=True)]
    assert [values[i] for i in within] == [values[i] for i in expected]
    assert sorted(within[:n // 3]) == list(range(n // 3))  # positions stay in their group


def test_distinct_strings_of_a_large_column_hash_apart() -> None:
    values = [f"doc{i}".encode() for i in range(200_000)] + [f"clueweb12-{i:07d}-00".encode() for i in range(1000)]
    strings = parts(values, [50_000, 150_000])
    assert np.unique(strings.keys(np.zeros(len(values), dtype=np.int32), 1)).size == len(values)


def test_arrow_chunks_with_offsets_and_empty_chunks() -> None:
    column = pa.chunked_array([pa.array(["q", "ab", "", "abc"]).slice(1, 3), pa.array([], pa.string()),
                               pa.array(["abc", "zz"])])
    strings = byte_strings(column.chunks)
    assert strings.lengths(slice(0, 5)).tolist() == [2, 0, 3, 3, 2]
    assert equal(strings, np.array([2, 0, 1]), strings, np.array([3, 4, 1])).tolist() == [True, False, True]
    assert strings.descending_within(np.arange(5), np.zeros(5, dtype=np.int64)).tolist() == [4, 2, 3, 0, 1]


@settings(max_examples=200, deadline=None)
@given(STRINGS, STRINGS)
def test_equality_across_two_columns_of_different_widths(left: list[bytes], right: list[bytes]) -> None:
    """A left string longer than anything on the right must not read past the right's data."""
    left = [*left, b"x" * 41]
    ours, theirs = parts(left, []), parts(right, [])
    a, b = (index.ravel() for index in np.meshgrid(np.arange(len(left)), np.arange(len(right))))
    expected = [left[i] == right[j] for i, j in zip(a.tolist(), b.tolist(), strict=True)]
    assert equal(ours, a, theirs, b).tolist() == expected
    assert equal(theirs, b, ours, a).tolist() == expected

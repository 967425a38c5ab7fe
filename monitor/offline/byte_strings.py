"""Many byte strings as numpy arrays: 64-bit hashes, pairwise equality and byte-order sort keys.

The join of a TREC run with its qrels compares document ids: sorting 2.8 M strings costs more than the
rest of the join. Here the ids are read eight bytes at a time (an unaligned ``uint64`` view of the
string data, gathered at each string's start plus 8·j) so that a few numpy passes per eight bytes give

* :meth:`ByteStrings.keys`: a 64-bit hash of each string, under a prefix (the join's query), for
  grouping only: equal strings always hash alike, and the join checks every pair it groups with
  :func:`equal`, so a collision can cost time, never a wrong answer;
* :func:`equal`: exact equality of pairs of strings (of one column or of two);
* :meth:`ByteStrings.order_keys`: ``uint64`` keys whose ``np.lexsort`` is byte order (as ``memcmp``,
  shorter first when one is a prefix of the other), for the rows whose scores tie.

Bytes past a string's end read as zero (the data ends with zero bytes, so no read leaves it). Passes
over every string go block by block, so their temporary arrays stay small: on the 2-core machine a
fresh page of memory costs more than the arithmetic done on it (docs/evaluate.md).

>>> strings = ByteStrings.from_parts([(np.array([0, 2, 12, 14], dtype=np.int32),
...                                    np.frombuffer(b"abdoc1234567ab", dtype=np.uint8))])
>>> equal(strings, np.array([0, 0]), strings, np.array([2, 1])).tolist()
[True, False]
>>> keys = strings.keys(np.zeros(3, dtype=np.int64), 1)
>>> bool(keys[0] == keys[2]), bool(keys[0] == keys[1])
(True, False)
>>> np.lexsort(strings.order_keys(np.arange(3))).tolist()  # "ab" = "ab" < "doc1234567"
[0, 2, 1]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
IndexArray = npt.NDArray[np.int32] | npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]

BLOCK = 1 << 16  # rows per block of a pass over every string

# MASK[r]: the low r bytes of a little-endian word (r = 8: all of it).
_MASK = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=np.uint64)
_SEED = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLY = np.uint64(0xFF51AFD7ED558CCD)


def blocks(n: int, size: int = BLOCK) -> Iterator[slice]:
    """Consecutive slices of at most ``size`` covering 0..n."""
    return (slice(low, min(low + size, n)) for low in range(0, n, size))


@dataclass(frozen=True)
class ByteStrings:
    """String i is ``data[offsets[i]:offsets[i + 1]]`` (Arrow's layout); past the last string, ``data``
    has at least 8 zero bytes more than the longest string, so any word of any string can be read."""

    data: npt.NDArray[np.uint8]
    offsets: IndexArray

    @classmethod
    def from_parts(cls, parts: Iterable[tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]]) -> ByteStrings:
        """From (offsets, data) pairs in Arrow's layout: string i of a part is
        ``data[offsets[i]:offsets[i + 1]]``; the parts' strings follow each other."""
        pairs = list(parts)
        size = sum(int(offsets[-1]) - int(offsets[0]) for offsets, _ in pairs)
        longest = max((int(np.diff(offsets).max(initial=0)) for offsets, _ in pairs), default=0)
        data = np.zeros(size + 8 * _width(longest) + 8, dtype=np.uint8)
        count = 1 + sum(offsets.size - 1 for offsets, _ in pairs)
        offsets_out: IndexArray = (np.zeros(count, dtype=np.int32) if data.size < 2**31
                                   else np.zeros(count, dtype=np.int64))
        at, row = 0, 0
        for offsets, part in pairs:
            low, high = int(offsets[0]), int(offsets[-1])
            data[at:at + high - low] = part[low:high]
            offsets_out[row:row + offsets.size] = offsets
            offsets_out[row:row + offsets.size] -= low - at
            at, row = at + high - low, row + offsets.size - 1
        return cls(data, offsets_out)

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def part(self, start: int) -> ByteStrings:
        """Strings ``start``, ``start + 1``, ... (views: nothing is copied)."""
        return ByteStrings(self.data, self.offsets[start:])

    def lengths(self, rows: IndexArray | slice) -> IndexArray:
        if isinstance(rows, slice):
            return np.diff(self.offsets[rows.start:rows.stop + 1])
        lengths: IndexArray = self.offsets[rows + 1] - self.offsets[rows]
        return lengths

    def _words(self, j: int) -> WordArray:
        """Every unaligned 8-byte word of the data from byte 8j on: word k is bytes 8j+k..8j+k+7."""
        return np.ndarray((self.data.size - 7 - 8 * j,), dtype="<u8", buffer=self.data, offset=8 * j,
                          strides=(1,))

    def word(self, rows: IndexArray | slice, j: int, lengths: IndexArray) -> WordArray:
        """Bytes 8j..8j+7 of the strings ``rows`` (whose ``lengths`` are given), zero past each one's end,
        little-endian."""
        words = self._words(j)[self.offsets[rows]]
        if lengths.size and int(lengths.min()) < 8 * (j + 1):  # some end within this word or before it
            longest = int(lengths.max())
            # mask[length]: the bytes of word j that a string of that length has
            words &= _MASK[np.clip(np.arange(longest + 1) - 8 * j, 0, 8)][lengths]
        return words

    def keys(self, prefix: IndexArray, bits: int, out: WordArray | None = None) -> WordArray:
        """For each string, ``prefix`` in the top ``bits`` bits and its hash in the others.

        The hash mixes the length and the words, each xored in and then multiplied by an odd constant,
        so every bit of the input reaches the high bits of the product, the ones kept.
        """
        out = np.empty(len(self), dtype=np.uint64) if out is None else out
        shift, top = np.uint64(bits), np.uint64(64 - bits)
        for rows in blocks(len(self)):
            lengths = self.lengths(rows)
            h = lengths.astype(np.uint64)
            h *= _SEED
            width = _width(int(lengths.max()))
            for j in range(width):
                h ^= self.word(rows, j, lengths)
                h *= _MULTIPLY
                if j + 1 < width:
                    h ^= h >> np.uint64(29)
            h >>= shift
            high = prefix[rows].astype(np.uint64)
            high <<= top
            np.bitwise_or(h, high, out=out[rows])
        return out

    def order_keys(self, rows: IndexArray) -> list[WordArray]:
        """Keys of ``rows`` for ``np.lexsort`` (least significant first): byte order of the strings."""
        lengths = self.lengths(rows)
        longest = int(lengths.max()) if lengths.size else 0
        words = [self.word(rows, j, lengths).byteswap() for j in reversed(range(_width(longest)))]
        return [lengths.astype(np.uint64), *words]


def equal(left: ByteStrings, a: IndexArray, right: ByteStrings, b: IndexArray) -> BoolArray:
    """Whether string ``a[i]`` of ``left`` equals string ``b[i]`` of ``right``, for each i."""
    same = np.empty(a.size, dtype=bool)
    for rows in blocks(a.size):
        lengths = left.lengths(a[rows])
        block = same[rows]
        np.equal(lengths, right.lengths(b[rows]), out=block)
        # words of pairs of equal length only: a longer left string may end past the right's padding
        for j in range(_width(int(lengths[block].max(initial=0)))):
            block &= left.word(a[rows], j, lengths) == right.word(b[rows], j, lengths)
    return same


def _width(length: int) -> int:
    """Words that hold a string of this length."""
    return (length + 7) // 8

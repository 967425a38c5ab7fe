"""Many byte strings as numpy arrays: 64-bit hashes, pairwise equality and byte-order sort keys.

The join of a TREC run with its qrels compares document ids: sorting 2.8 M strings costs more than the
rest of the join. Here the ids are read eight bytes at a time (an unaligned ``uint64`` view of the
string data, gathered at each string's start plus 8·j) so that one numpy pass per eight bytes gives

* :meth:`ByteStrings.hashes`: a 64-bit hash of each string (used for grouping only: equal strings always
  hash alike, and the join checks every pair it groups with :meth:`ByteStrings.equal`, so a collision
  can cost time, never a wrong answer);
* :meth:`ByteStrings.equal`: exact equality of pairs of strings;
* :meth:`ByteStrings.order_keys`: ``uint64`` keys whose ``np.lexsort`` is byte order (as ``memcmp``,
  shorter first when one is a prefix of the other), for the few rows whose scores tie.

Bytes past a string's end read as zero (the data ends with zero bytes, so no read leaves it).

>>> strings = ByteStrings.from_parts([(np.array([0, 2, 12, 14], dtype=np.int32),
...                                    np.frombuffer(b"abdoc1234567ab", dtype=np.uint8))])
>>> strings.equal(np.array([0, 0]), np.array([2, 1])).tolist()
[True, False]
>>> hashes = strings.hashes()
>>> bool(hashes[0] == hashes[2]), bool(hashes[0] == hashes[1])
(True, False)
>>> np.lexsort(strings.order_keys(np.arange(3))).tolist()  # "ab" = "ab" < "doc1234567"
[0, 2, 1]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]

# MASK[r]: the low r bytes of a little-endian word (r = 8: all of it).
_MASK = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=np.uint64)
_SEED = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLY = np.uint64(0xFF51AFD7ED558CCD)


@dataclass(frozen=True)
class ByteStrings:
    """String i is ``data[starts[i]:starts[i] + lengths[i]]``; past the last string, ``data`` has at
    least 8 zero bytes more than the longest string, so any word of any string can be read."""

    data: npt.NDArray[np.uint8]
    starts: IntArray
    lengths: IntArray

    @classmethod
    def from_parts(cls, parts: Iterable[tuple[npt.NDArray[np.int32], npt.NDArray[np.uint8]]]) -> ByteStrings:
        """From (offsets, data) pairs in Arrow's layout: string i of a part is
        ``data[offsets[i]:offsets[i + 1]]``; the parts' strings follow each other."""
        datas: list[npt.NDArray[np.uint8]] = []
        starts: list[IntArray] = []
        lengths: list[IntArray] = []
        base = 0
        for offsets, data in parts:
            low, high = int(offsets[0]), int(offsets[-1])
            datas.append(data[low:high])
            starts.append(offsets[:-1].astype(np.int64) + (base - low))
            lengths.append(np.diff(offsets).astype(np.int64))
            base += high - low
        length = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        longest = int(length.max()) if length.size else 0
        datas.append(np.zeros(8 * _width(longest) + 8, dtype=np.uint8))
        return cls(np.concatenate(datas), np.concatenate(starts) if starts else length, length)

    def __len__(self) -> int:
        return int(self.starts.size)

    def part(self, start: int) -> ByteStrings:
        """Strings ``start``, ``start + 1``, ... (views: nothing is copied)."""
        return ByteStrings(self.data, self.starts[start:], self.lengths[start:])

    @cached_property
    def _longest(self) -> int:
        return int(self.lengths.max()) if self.lengths.size else 0

    @cached_property
    def _shortest(self) -> int:
        return int(self.lengths.min()) if self.lengths.size else 0

    def _words(self) -> WordArray:
        """Every unaligned 8-byte word of the data: word k is bytes k..k+7, little-endian."""
        return np.ndarray((self.data.size - 7,), dtype="<u8", buffer=self.data, strides=(1,))

    def word(self, rows: IntArray | None, j: int) -> WordArray:
        """Bytes 8j..8j+7 of each string (of ``rows``, or all), zero past its end, little-endian."""
        starts = self.starts if rows is None else self.starts[rows]
        words = self._words()[starts if j == 0 else starts + 8 * j]
        if self._shortest < 8 * (j + 1):  # some strings end within this word or before it
            lengths = self.lengths if rows is None else self.lengths[rows]
            # mask[length]: the bytes of word j that a string of that length has
            mask = _MASK[np.clip(np.arange(self._longest + 1) - 8 * j, 0, 8)]
            words &= mask[lengths]
        return words

    def hashes(self) -> WordArray:
        """A 64-bit hash of every string: its length and its words, each xored in, then multiplied by
        an odd constant (so every bit reaches the high bits, which are the ones the join keeps)."""
        h = self.lengths.astype(np.uint64)
        h *= _SEED
        for j in range(_width(self._longest)):
            h ^= self.word(None, j)
            h *= _MULTIPLY
            if j + 1 < _width(self._longest):
                h ^= h >> np.uint64(29)
        return h

    def equal(self, a: IntArray, b: IntArray) -> BoolArray:
        """Whether string a[i] equals string b[i], for each i."""
        same: BoolArray = self.lengths[a] == self.lengths[b]
        longest = int(self.lengths[a].max()) if a.size else 0
        for j in range(_width(longest)):
            same &= self.word(a, j) == self.word(b, j)
        return same

    def order_keys(self, rows: IntArray) -> list[WordArray]:
        """Keys of ``rows`` for ``np.lexsort`` (least significant first): byte order of the strings."""
        longest = int(self.lengths[rows].max()) if rows.size else 0
        words = [self.word(rows, j).byteswap() for j in reversed(range(_width(longest)))]
        return [self.lengths[rows].astype(np.uint64), *words]


def _width(length: int) -> int:
    """Words that hold a string of this length."""
    return (length + 7) // 8

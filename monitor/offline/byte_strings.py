"""Many byte strings as numpy arrays: 64-bit hashes, pairwise equality and byte order within groups.

The join of a TREC run with its qrels compares document ids: sorting 2.8 M strings costs more than the
rest of the join. Here the ids are read eight bytes at a time (an unaligned ``uint64`` view of the
string data, gathered at each string's start plus 8·j) so that a few numpy passes per eight bytes give

* :meth:`ByteStrings.keys`: a 64-bit hash of each string, under a prefix (the join's query), for
  grouping only: equal strings always hash alike, and the join checks every pair it groups with
  :func:`equal`, so a collision can cost time, never a wrong answer;
* :func:`equal`: exact equality of pairs of strings (of one column or of two);
* :meth:`ByteStrings.descending_within`: byte order descending (as ``memcmp``, reversed: a string
  before its prefixes) within groups of rows, for the rows whose scores tie.

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
>>> strings.descending_within(np.arange(3), np.zeros(3, dtype=np.int64)).tolist()  # "doc1234567" > "ab"
[1, 0, 2]
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

    def _at(self, offset: int) -> WordArray:
        """Every unaligned 8-byte word of the data from byte ``offset`` on: word k is bytes offset + k
        to offset + k + 7."""
        return np.ndarray((self.data.size - 7 - offset,), dtype="<u8", buffer=self.data, offset=offset,
                          strides=(1,))

    def chunk(self, rows: IndexArray | slice, offset: int, lengths: IndexArray, count: int = 8) -> WordArray:
        """Bytes offset .. offset + count - 1 (count ≤ 8) of the strings ``rows`` (whose ``lengths`` are
        given), zero past each one's end, as little-endian words (the first byte lowest)."""
        words = self._at(offset)[self.offsets[rows]]
        if lengths.size and int(lengths.min()) < offset + count:  # some end before these bytes do
            longest = int(lengths.max())
            # mask[length]: the bytes of this chunk that a string of that length has
            words &= _MASK[np.clip(np.arange(longest + 1) - offset, 0, count)][lengths]
        elif count < 8:
            words &= _MASK[count]
        return words

    def word(self, rows: IndexArray | slice, j: int, lengths: IndexArray) -> WordArray:
        """Bytes 8j..8j+7 of the strings ``rows`` (whose ``lengths`` are given), zero past each one's end,
        little-endian."""
        return self.chunk(rows, 8 * j, lengths)

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

    def descending_within(self, rows: IndexArray, groups: IntArray) -> IntArray:
        """The positions 0 .. n - 1 of ``rows`` ordered within each group by their strings in byte order
        descending (a string before its own prefixes); ``groups`` is nondecreasing, so each group's
        positions stay where they are.

        Most significant bytes first: each pass sorts the positions still tied on (group, the next few
        bytes, inverted) packed into one ``uint64``, and the positions whose keys then tie form the next
        pass's groups; strings equal but for their length (trailing zero bytes) go longest first.
        """
        order = np.arange(rows.size, dtype=np.int64)
        tied = order.copy()  # positions still tied, in order; groups[...] their groups
        groups = np.cumsum(np.r_[0, groups[1:] != groups[:-1]])  # numbered 0, 1, ...
        lengths = self.lengths(rows)
        longest = int(lengths.max()) if lengths.size else 0
        offset = 0
        while tied.size > 1:
            bits = max(1, int(groups[-1]).bit_length())
            count = min((64 - bits) // 8, 8)
            picked = rows[order[tied]]
            if offset < longest:
                value = self.chunk(picked, offset, lengths[order[tied]], count).byteswap()
                value >>= np.uint64(64 - 8 * count)
                value ^= _MASK[count]  # inverted: descending
            else:  # every byte compared: longest first
                value = longest - lengths[order[tied]].astype(np.uint64)
            key = groups.astype(np.uint64) << np.uint64(64 - bits)
            key |= value
            sort = np.argsort(key, kind="stable")
            order[tied] = order[tied][sort]
            key = key[sort]
            if offset >= longest:
                break
            same = key[1:] == key[:-1]
            still = np.zeros(tied.size, dtype=bool)
            still[:-1] = same
            still[1:] |= same
            tied, key = tied[still], key[still]
            groups = np.cumsum(np.r_[0, key[1:] != key[:-1]])
            offset += count
        return order


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

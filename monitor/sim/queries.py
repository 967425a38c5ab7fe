"""The query vocabulary: head / torso / tail queries and how often each is searched.

Head queries are bare product words ("蓝牙耳机", "running shoes"), torso queries add a modifier
("防水蓝牙耳机", "running shoes for women"), tail queries add a modifier and a number
("蓝牙耳机 降噪 7", "running shoes waterproof 123"). No string appears twice in the vocabulary, so no
query belongs to two buckets.

A session's query is drawn from one global distribution: bucket ``b`` gets its configured share, and
within the bucket the query of rank ``r`` (1-based) gets weight ``r^-s_b`` (Zipf). The defaults
(s = 1.0 / 0.4 / 0.2) keep every head query more frequent than every torso query, and every torso query
more frequent than every tail query.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.sim.config import BUCKETS, SimConfig

_ZH_WORDS = ("蓝牙耳机", "手机壳", "连衣裙", "运动鞋", "笔记本电脑", "洗面奶", "充电宝", "机械键盘", "保温杯",
             "羽绒服", "面膜", "口红", "跑步机", "电动牙刷", "空气炸锅", "行李箱", "双肩包", "投影仪",
             "扫地机器人", "咖啡机", "台灯", "瑜伽垫", "电饭煲", "数据线", "显示器", "儿童书包", "登山鞋",
             "猫粮", "狗粮", "吹风机")
_EN_WORDS = ("running shoes", "wireless earbuds", "phone case", "yoga mat", "gaming laptop", "air fryer",
             "coffee maker", "winter jacket", "backpack", "smart watch", "desk lamp", "office chair",
             "water bottle", "sunglasses", "hiking boots", "electric toothbrush", "standing desk",
             "baby stroller", "rice cooker", "mechanical keyboard", "usb c cable", "monitor arm",
             "dog food", "cat litter", "hair dryer", "bike helmet", "tent", "webcam", "blender", "vacuum")
_ZH_MODIFIERS = ("防水", "无线", "便携", "大容量", "降噪", "平价", "学生", "迷你", "男款", "女款", "儿童",
                 "新款", "高端", "轻薄", "静音", "折叠", "加厚", "智能", "国产", "进口")
_EN_MODIFIERS = ("for men", "for women", "for kids", "waterproof", "cheap", "best", "lightweight", "black",
                 "large", "mini", "under 50", "foldable", "quiet", "portable", "2 pack", "refurbished",
                 "bluetooth", "stainless steel", "white", "pro")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Vocabulary:
    """Every query of the run; a query's number is its index in ``texts`` (doc ids use it)."""

    texts: tuple[str, ...]
    buckets: tuple[str, ...]
    probabilities: FloatArray  # probability that a session searches query i

    def of_bucket(self, bucket: str) -> list[int]:
        return [i for i, b in enumerate(self.buckets) if b == bucket]

    def sample(self, rng: np.random.Generator, size: int) -> IntArray:
        """``size`` query numbers drawn from the traffic distribution."""
        cdf = np.cumsum(self.probabilities)
        cdf /= cdf[-1]
        drawn = np.searchsorted(cdf, rng.random(size), side="right")
        return np.minimum(drawn, len(self.texts) - 1).astype(np.int64)


def zipf_weights(n: int, exponent: float) -> FloatArray:
    """Normalised weights ``r^-s`` for ranks 1..n."""
    weights: FloatArray = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    normalised: FloatArray = weights / weights.sum()
    return normalised


def _head_text(i: int, rng: np.random.Generator) -> str:
    words = _ZH_WORDS if i % 2 == 0 else _EN_WORDS
    word = words[(i // 2) % len(words)]
    rounds = i // (2 * len(words))
    return word if rounds == 0 else f"{word} {_EN_MODIFIERS[rng.integers(len(_EN_MODIFIERS))]} {rounds}"


def _torso_text(rng: np.random.Generator) -> str:
    if rng.random() < 0.5:
        return f"{_ZH_MODIFIERS[rng.integers(len(_ZH_MODIFIERS))]}{_ZH_WORDS[rng.integers(len(_ZH_WORDS))]}"
    modifier = _EN_MODIFIERS[rng.integers(len(_EN_MODIFIERS))]
    word = _EN_WORDS[rng.integers(len(_EN_WORDS))]
    return f"{word} {modifier}" if modifier.startswith(("for", "under")) else f"{modifier} {word}"


def _tail_text(rng: np.random.Generator) -> str:
    number = int(rng.integers(1, 1000))
    if rng.random() < 0.5:
        word = _ZH_WORDS[rng.integers(len(_ZH_WORDS))]
        return f"{word} {_ZH_MODIFIERS[rng.integers(len(_ZH_MODIFIERS))]} {number}"
    word = _EN_WORDS[rng.integers(len(_EN_WORDS))]
    return f"{word} {_EN_MODIFIERS[rng.integers(len(_EN_MODIFIERS))]} {number}"


def build_vocabulary(config: SimConfig, rng: np.random.Generator) -> Vocabulary:
    """Draw distinct query strings for each bucket (head first, then torso, then tail)."""
    seen: set[str] = set()
    texts: list[str] = []
    buckets: list[str] = []
    probabilities: list[FloatArray] = []
    for bucket in BUCKETS:
        wanted = config.vocabulary_size(bucket)
        drawn = 0
        attempts = 0
        while drawn < wanted:
            attempts += 1
            if attempts > 50 * wanted + 1000:
                raise ValueError(f"n_{bucket}: cannot draw {wanted} distinct {bucket} queries")
            if bucket == "head":
                text = _head_text(attempts - 1, rng)
            elif bucket == "torso":
                text = _torso_text(rng)
            else:
                text = _tail_text(rng)
            if text in seen:
                continue
            seen.add(text)
            texts.append(text)
            buckets.append(bucket)
            drawn += 1
        probabilities.append(config.share(bucket) * zipf_weights(wanted, config.zipf(bucket)))
    return Vocabulary(tuple(texts), tuple(buckets), np.concatenate(probabilities))

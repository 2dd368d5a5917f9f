"""Content model (docs/REVISIT.md §D1), so the REAL detector (``shhd.fingerprint``: jieba + simhash) runs on
simulated pages: page text = page chrome (template, optional) + a noise block (counters, optional) + the item
window (the latest ``window`` items; a large window stands in for an append-only page).

Items are Chinese review-like texts drawn from a seeded Zipf vocabulary; each item is tokenised by jieba once and
cached, and a page's fingerprint is memoised per (visible items, noise version), so policies that crawl the same
page state share the work. ``fingerprint_tokens(all tokens) == fingerprint_texts(texts)`` by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from shhd.fingerprint import fingerprint_tokens, tokenize

# Common characters used to build words; segmentation of their concatenation is left to jieba, as on a real page.
_CHARS = (
    "的一是不了在人有我他这个们中来上大为和国地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里"
    "用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实"
    "日军者意无力它与长把机十民第公此已工使情明性知全三又关点正业外将两高间由问很最重并物手应战向头文体政"
    "美相见被利什二等产或新己制身果加西斯月话合回特代内信表化老给世位次度门任常先海通教儿原东声提立及比员"
    "解水名真论处走义各入几口认条平系气题活尔更别打女变四神总何电数安少报才结反受目太量再感建务做接必场件"
    "计管期市直德资命山金指克许统区保至队形社便空决治展马科司五基眼书非则听白却界达光放强即像难且权思王象"
    "质物流快递包装正品好评价格便宜划算推荐购买满意客服态度颜色尺码舒服味道新鲜"
)
#: Vocabulary size and Zipf exponent of word frequencies (Zipf 1.07: docs/REVISIT.md §D1).
VOCAB = 3000
ZIPF = 1.07
#: Words per item (uniform in this range).
ITEM_WORDS = (8, 20)


@lru_cache(maxsize=4)
def _vocabulary(seed: int) -> tuple[list[str], np.ndarray]:
    """VOCAB distinct 1-3 character words in random order, with Zipf(ZIPF) probabilities."""
    rng = np.random.default_rng(seed)
    chars = np.array(list(_CHARS))
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        lengths = rng.choice([1, 2, 2, 2, 3], VOCAB)
        picks = rng.integers(0, chars.size, (VOCAB, 3))
        for n, row in zip(lengths, picks, strict=True):
            words.setdefault("".join(chars[row[:n]]), None)
    vocab = list(words)[:VOCAB]
    p = 1.0 / np.arange(1, VOCAB + 1) ** ZIPF
    return vocab, p / p.sum()


def _cumulative(p: np.ndarray) -> np.ndarray:
    """The table ``Generator.choice(VOCAB, n, p=p)`` builds on every call (the cumulative sum, scaled to end at 1),
    built once: choice then draws ``random(n)`` and looks each draw up in it, so ``_text`` does the same with the
    same stream and gets the same words. choice's checks of ``p`` and building this table took over half of the
    time of a text, and a text is made for every item a run replays (``test_revisit_traces_scale`` checks that
    the words are choice's)."""
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return cdf


@dataclass
class ContentModel:
    """Generates and caches item texts and page fingerprints for one seed."""

    seed: int
    #: Items visible on the page (sliding window); a large number models an append-only page.
    window: int = 10
    #: Words of fixed page chrome (product title, description, navigation) included in the fingerprint.
    chrome_words: int = 0
    #: Whether a counter block ("已售 N 件 浏览 M 次") that changes at noise times is part of the fingerprint.
    noise_block: bool = False
    _vocab: list[str] = field(default_factory=list, init=False)
    _p: np.ndarray = field(default_factory=lambda: np.empty(0), init=False)
    _cdf: np.ndarray = field(default_factory=lambda: np.empty(0), init=False)
    _items: dict[tuple[int, int], list[str]] = field(default_factory=dict, init=False)
    _chrome: dict[int, list[str]] = field(default_factory=dict, init=False)
    _fps: dict[tuple[int, int, int], int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._vocab, self._p = _vocabulary(12345)  # one language for all seeds
        self._cdf = _cumulative(self._p)

    def _text(self, *key: int, words: int | None = None) -> str:
        rng = np.random.default_rng([self.seed, *key])
        n = words if words is not None else int(rng.integers(ITEM_WORDS[0], ITEM_WORDS[1] + 1))
        picks = self._cdf.searchsorted(rng.random(n), side="right")  # rng.choice(VOCAB, n, p=self._p), faster
        parts = [self._vocab[k] for k in picks]
        for cut in range(5, len(parts), 6):
            parts[cut] += "，"
        return "".join(parts) + "。"

    def item_text(self, page: int, index: int) -> str:
        """Text of the page's index-th item (deterministic per seed)."""
        return self._text(page, 0, index)

    def item_tokens(self, page: int, index: int) -> list[str]:
        key = (page, index)
        if key not in self._items:
            self._items[key] = tokenize(self.item_text(page, index))
        return self._items[key]

    def page_texts(self, page: int, n_items: int, noise_version: int) -> list[str]:
        """The texts the crawler would fingerprint (chrome, counter block, visible items), newest item first."""
        texts = [self._text(page, 1, 0, words=self.chrome_words)] if self.chrome_words else []
        if self.noise_block:
            texts.append(f"已售 {1000 + 7 * noise_version} 件 浏览 {50000 + 131 * noise_version} 次")
        texts += [self.item_text(page, k) for k in range(n_items - 1, max(n_items - self.window, 0) - 1, -1)]
        return texts

    def fingerprint(self, page: int, n_items: int, noise_version: int = 0) -> int:
        """Real simhash of the page after its first ``n_items`` items, memoised."""
        key = (page, n_items, noise_version if self.noise_block else 0)
        fp = self._fps.get(key)
        if fp is None:
            tokens: list[str] = []
            if self.chrome_words:
                if page not in self._chrome:
                    self._chrome[page] = tokenize(self._text(page, 1, 0, words=self.chrome_words))
                tokens += self._chrome[page]
            if self.noise_block:
                tokens += tokenize(f"已售 {1000 + 7 * noise_version} 件 浏览 {50000 + 131 * noise_version} 次")
            for k in range(max(n_items - self.window, 0), n_items):
                tokens += self.item_tokens(page, k)
            fp = self._fps[key] = fingerprint_tokens(tokens)
        return fp

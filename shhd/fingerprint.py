"""Content fingerprint for SHHD: jieba tokens -> term-frequency weights -> 64-bit Charikar simhash.

Why this shape: the scheduler compares the fingerprint of a target's crawled item window with the previous one by
Hamming distance (``hamming``), so the value must be identical across processes and machines. Token hashes therefore
come from blake2b (never Python's salted ``hash()``), and the words are jieba's (``shhd.segment``: the same words
as ``jieba.lcut(text, HMM=False)``, from jieba's dictionary, about twice as fast).

Public API (used by crawler_client and bench/revisit):

    fingerprint_texts(texts) -> int        # unsigned 64-bit, 0 for empty input
    hamming(a, b) -> int
    tokenize(text) -> list[str]            # the features fingerprint_texts uses, cacheable by callers
    fingerprint_tokens(tokens) -> int      # fingerprint_texts(texts) == fingerprint_tokens(all tokens of texts)
    cache_usage() -> dict[str, CacheUsage] # what the memory caches below hold (a client's /metrics shows it)

Cost: tokenising is most of a fingerprint (``icecrawler bench fingerprint`` times both parts), and a re-crawl
fingerprints a window whose items were mostly seen on the previous visit. ``tokenize`` therefore keeps a bounded
LRU cache (``TOKEN_CACHE_TEXTS`` texts) of each text's features, keyed by a 128-bit blake2b digest of the text
(stable and collision-safe; the text itself is not kept). Three more caches sit under it: each word's feature,
each feature's hash, and each dictionary word's log-probability (``shhd.segment``). Every one is bounded, so a
client's memory grows while they fill (days of crawling, docs/BENCHMARKS.md "soak") and then stops.
The cache only skips recomputing a pure function, so cached and uncached fingerprints are bit-identical.
"""

from __future__ import annotations

import hashlib
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shhd.segment import cut, word_cache_usage

__all__ = [
    "BITS",
    "TOKEN_CACHE_TEXTS",
    "CacheUsage",
    "cache_usage",
    "clear_token_cache",
    "fingerprint_texts",
    "fingerprint_tokens",
    "fingerprint_weights",
    "hamming",
    "token_hash",
    "tokenize",
]

#: Fingerprint width in bits (Manku et al. 2007: 64-bit fingerprints, near-duplicate iff d <= 3).
BITS = 64
_MASK = (1 << BITS) - 1


#: word -> its feature (lower-cased) or "" when it is none; cleared when it grows past ``_FEATURE_WORDS``.
_features: dict[str, str] = {}
_FEATURE_WORDS = 1 << 17


def _remember_feature(word: str) -> str:
    """Whitespace- and punctuation-only words carry no content: "" for them, else the word lower-cased. (The
    same few thousand words recur, and the per-character Unicode lookups were a visible share of tokenising in
    ``icecrawler bench fingerprint``, so the answer is remembered in ``_features``, which callers read first.)"""
    if len(_features) >= _FEATURE_WORDS:
        _features.clear()
    is_feature = any(not (ch.isspace() or unicodedata.category(ch).startswith("P")) for ch in word)
    feature = _features[word] = word.lower() if is_feature else ""
    return feature


#: Texts whose features ``tokenize`` remembers (LRU). 16 384 texts ≈ 360 windows of 45 items; entries hold the
#: tokens only (a few KiB per text at most), so the cache stays in the tens of MiB even for long posts.
TOKEN_CACHE_TEXTS = 1 << 14


class _TokenCache:
    """Bounded, thread-safe LRU map: blake2b-128 digest of a text → its features (a tuple, never mutated)."""

    def __init__(self, max_texts: int) -> None:
        self._max = max_texts
        self._entries: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, key: bytes) -> tuple[str, ...] | None:
        with self._lock:
            tokens = self._entries.get(key)
            if tokens is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return tokens

    def put(self, key: bytes, tokens: tuple[str, ...]) -> None:
        with self._lock:
            self._entries[key] = tokens
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


_token_cache = _TokenCache(TOKEN_CACHE_TEXTS)


def clear_token_cache() -> None:
    """Forget every cached text (benchmarks time cold, first-visit tokenising with it)."""
    _token_cache.clear()


def _tokenize_uncached(text: str) -> tuple[str, ...]:
    features = _features
    found = []
    for word in cut(text):
        feature = features.get(word)
        if feature is None:
            feature = _remember_feature(word)
        if feature:
            found.append(feature)
    return tuple(found)


def _tokens(text: str) -> tuple[str, ...]:
    """``tokenize`` without the defensive copy (through the LRU cache)."""
    if not text:
        return ()
    key = _TokenCache.key(text)
    tokens = _token_cache.get(key)
    if tokens is None:
        tokens = _tokenize_uncached(text)
        _token_cache.put(key, tokens)
    return tokens


def tokenize(text: str) -> list[str]:
    """jieba accurate-mode words of ``text`` (``shhd.segment.cut``), lower-cased, without whitespace/punctuation
    tokens.

    The HMM new-word pass is off: it is the slow part of jieba, and a fingerprint needs stable features, not new
    words (unknown runs fall back to single characters, which are just as deterministic). Results come from a
    bounded LRU cache when the same text was tokenised recently (see the module docstring)."""
    return list(_tokens(text))


@lru_cache(maxsize=1 << 17)
def token_hash(token: str) -> int:
    """Stable unsigned 64-bit hash of one token (blake2b, 8-byte digest): same value on every machine. A lone
    surrogate (a page's ``"\ud800"`` escape) is hashed as its code point, never a crash."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def fingerprint_weights(weights: Mapping[str, float]) -> int:
    """Charikar simhash of weighted features: bit i is 1 where sum(w * (+1 if hash bit i else -1)) > 0."""
    n = len(weights)
    if n == 0:
        return 0
    hashes = np.fromiter(map(token_hash, weights.keys()), dtype="<u8", count=n)
    w = np.fromiter(weights.values(), dtype=np.float64, count=n)
    if not (w > 0).any():
        return 0
    w = np.maximum(w, 0.0)
    bits = np.unpackbits(hashes.view(np.uint8).reshape(n, 8), axis=1, bitorder="little")  # (n, 64), bit i = 2**i
    votes = w @ bits - 0.5 * w.sum()  # = sum(w * (+1/-1)) / 2
    return int(np.packbits(votes > 0, bitorder="little").view("<u8")[0])


def fingerprint_tokens(tokens: Iterable[str]) -> int:
    """Simhash of a token stream with term-frequency weights (0 when there are no tokens)."""
    return fingerprint_weights(Counter(tokens))


def fingerprint_texts(texts: Iterable[str]) -> int:
    """Fingerprint of a crawled item window: every text is tokenised separately, counts are pooled."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_tokens(text))
    return fingerprint_weights(counts)


@dataclass(frozen=True)
class CacheUsage:
    """One memory cache: how many entries it holds, the most it may hold, and its lookups so far (None where it
    does not count them)."""

    entries: int
    capacity: int
    hits: int | None = None
    misses: int | None = None


def cache_usage() -> dict[str, CacheUsage]:
    """The fingerprint's memory caches of this process, by name. They are the part of a crawler client's memory
    that grows with what it has crawled; each stops at its capacity (the feature words start again from empty)."""
    hashes = token_hash.cache_info()
    words, dictionary_words = word_cache_usage()
    return {
        "fingerprint_texts": CacheUsage(len(_token_cache), TOKEN_CACHE_TEXTS, _token_cache.hits, _token_cache.misses),
        "feature_words": CacheUsage(len(_features), _FEATURE_WORDS),
        "token_hashes": CacheUsage(hashes.currsize, hashes.maxsize or 0, hashes.hits, hashes.misses),
        "word_log_probs": CacheUsage(words, dictionary_words),
    }


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints."""
    return ((a ^ b) & _MASK).bit_count()

"""Content fingerprint for SHHD: jieba tokens -> term-frequency weights -> 64-bit Charikar simhash.

Why this shape: the scheduler compares the fingerprint of a target's crawled item window with the previous one by
Hamming distance (``hamming``), so the value must be identical across processes and machines. Token hashes therefore
come from blake2b (never Python's salted ``hash()``), and jieba is initialised once, quietly, on first use.

Public API (used by crawler_client and bench/revisit):

    fingerprint_texts(texts) -> int        # unsigned 64-bit, 0 for empty input
    hamming(a, b) -> int
    tokenize(text) -> list[str]            # the features fingerprint_texts uses, cacheable by callers
    fingerprint_tokens(tokens) -> int      # fingerprint_texts(texts) == fingerprint_tokens(all tokens of texts)
"""

from __future__ import annotations

import hashlib
import logging
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache

import numpy as np

__all__ = ["BITS", "fingerprint_texts", "fingerprint_tokens", "fingerprint_weights", "hamming", "token_hash",
           "tokenize"]

#: Fingerprint width in bits (Manku et al. 2007: 64-bit fingerprints, near-duplicate iff d <= 3).
BITS = 64
_MASK = (1 << BITS) - 1
_jieba_lock = threading.Lock()
_jieba_ready = False


def _jieba() -> object:
    """Import and initialise jieba once, with its stderr chatter ("Building prefix dict ...") silenced."""
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    return jieba


def _is_feature(token: str) -> bool:
    """Whitespace- and punctuation-only tokens carry no content, so they are not features."""
    return any(not (ch.isspace() or unicodedata.category(ch).startswith("P")) for ch in token)


def tokenize(text: str) -> list[str]:
    """jieba accurate-mode words of ``text``, lower-cased, without whitespace/punctuation tokens.

    The HMM new-word pass is off: it is the slow part of jieba, and a fingerprint needs stable features, not new
    words (unknown runs fall back to single characters, which are just as deterministic)."""
    if not text:
        return []
    words = _jieba().lcut(text, HMM=False)  # type: ignore[attr-defined]
    return [w.lower() for w in words if _is_feature(w)]


@lru_cache(maxsize=1 << 17)
def token_hash(token: str) -> int:
    """Stable unsigned 64-bit hash of one token (blake2b, 8-byte digest): same value on every machine."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")


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
        counts.update(tokenize(text))
    return fingerprint_weights(counts)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints."""
    return ((a ^ b) & _MASK).bit_count()

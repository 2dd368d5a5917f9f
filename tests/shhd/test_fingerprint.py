"""shhd.fingerprint: determinism across processes, the simhash construction, and hamming."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from shhd.fingerprint import fingerprint_texts, fingerprint_tokens, fingerprint_weights, hamming, token_hash, tokenize

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["这个商品质量很好，物流也快！", "推荐购买，客服态度满意。", "颜色和尺码都合适 ABC123"]


def _reference_simhash(weights: dict[str, float]) -> int:
    """Charikar simhash written out bit by bit, as Manku et al. describe it."""
    v = [0.0] * 64
    for tok, w in weights.items():
        h = token_hash(tok)
        for i in range(64):
            v[i] += w if (h >> i) & 1 else -w
    return sum(1 << i for i in range(64) if v[i] > 0)


def test_empty_input_is_zero() -> None:
    assert fingerprint_texts([]) == 0
    assert fingerprint_texts(["", "  ，。"]) == 0
    assert fingerprint_tokens([]) == 0


def test_matches_reference_construction() -> None:
    counts = Counter(tok for text in TEXTS for tok in tokenize(text))
    fp = fingerprint_texts(TEXTS)
    assert fp == _reference_simhash(dict(counts))
    assert fp == fingerprint_weights(counts) == fingerprint_tokens(tok for t in TEXTS for tok in tokenize(t))
    assert 0 < fp < 2**64


def test_tokenize_drops_punctuation_and_whitespace() -> None:
    tokens = tokenize("好评！ 推荐\n购买")
    assert tokens and all(t.strip() and t not in {"！", "，"} for t in tokens)


def test_same_value_in_another_process_with_another_hash_seed() -> None:
    code = "from shhd.fingerprint import fingerprint_texts as f; import sys; print(f(sys.argv[1:]))"
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, *TEXTS], env=env, capture_output=True, text=True, check=True)
    assert int(out.stdout.strip()) == fingerprint_texts(TEXTS)


@pytest.mark.parametrize(("a", "b", "d"), [(0, 0, 0), (0, 2**64 - 1, 64), (0b1011, 0b0001, 2), (1 << 63, 0, 1)])
def test_hamming(a: int, b: int, d: int) -> None:
    assert hamming(a, b) == d == hamming(b, a)


def test_one_new_item_in_a_long_window_moves_few_bits() -> None:
    # The known weakness the design names: a window dominated by old items barely changes.
    base = [f"第{k}条评论，质量很好，物流很快，包装完整" for k in range(30)]
    assert hamming(fingerprint_texts(base), fingerprint_texts([*base, "颜色不对，退货了"])) < 25


def test_token_cache_gives_bit_identical_fingerprints() -> None:
    import shhd.fingerprint as fp

    texts = [*TEXTS, "好评！ 推荐\n购买", "Apple iPhone 很好用", "", "颜色不对，退货了"]
    fp._token_cache.clear()
    uncached = [fp._tokenize_uncached(text) for text in texts]
    cold = fingerprint_texts(texts)  # fills the cache
    assert fp._token_cache.misses > 0 and fp._token_cache.hits == 0
    warm = fingerprint_texts(texts)  # served from the cache
    assert fp._token_cache.hits > 0
    assert cold == warm == fingerprint_tokens(tok for toks in uncached for tok in toks)
    assert [tokenize(text) for text in texts] == [list(toks) for toks in uncached]
    tokenize(texts[0]).append("mutated")  # callers get a copy: the cached entry stays intact
    assert tokenize(texts[0]) == list(uncached[0])


def test_token_cache_is_bounded() -> None:
    import shhd.fingerprint as fp

    cache = fp._TokenCache(max_texts=3)
    for n in range(5):
        cache.put(fp._TokenCache.key(str(n)), (str(n),))
    assert len(cache) == 3
    assert cache.get(fp._TokenCache.key("0")) is None
    assert cache.get(fp._TokenCache.key("4")) == ("4",)


def test_cache_usage_counts_every_cache_within_its_capacity() -> None:
    import shhd.fingerprint as fp

    fp.clear_token_cache()
    fingerprint_texts(TEXTS)
    fingerprint_texts(TEXTS)
    usage = fp.cache_usage()
    assert set(usage) == {"fingerprint_texts", "feature_words", "token_hashes", "word_log_probs"}
    texts = usage["fingerprint_texts"]
    assert (texts.entries, texts.capacity, texts.hits, texts.misses) == (3, fp.TOKEN_CACHE_TEXTS, 3, 3)
    assert usage["word_log_probs"].capacity > 100_000  # jieba's dictionary, loaded by the first text
    assert usage["feature_words"].hits is None and usage["token_hashes"].hits is not None
    for name, cache in usage.items():
        assert 0 < cache.entries <= cache.capacity, name

"""Chinese word segmentation for fingerprints: jieba's accurate mode without HMM, computed in one pass.

``cut(text)`` returns exactly the words of ``jieba.lcut(text, HMM=False)`` (property-tested against it in
tests/shhd/test_segment.py), from jieba's own dictionary, so fingerprints do not change. Why not call jieba:
tokenising is most of a fingerprint and a fifth of a crawler client's CPU on first visits. jieba builds a DAG of
dictionary words, then a second pass takes ``log`` of every candidate's frequency and a ``max`` over generated
tuples; here each start position is scored while its dictionary words are found (right to left, so the best route
from every later position is known), with each word's log-probability computed once per process.

The maximum-probability route: from position i, take the dictionary word ``text[i:j+1]`` that maximises
``log(freq / total) + best(j+1)``; ties go to the longer word, and a character that starts no dictionary word
stands alone with frequency 1. Runs of single ASCII letters/digits are joined, as jieba does. Outside runs of
Han characters, ASCII letters, digits and ``+#&._%-``, every character is its own word except whitespace, which
comes out in runs split at each character (``\\r\\n`` stays one).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Any

__all__ = ["cut", "word_cache_usage"]

#: jieba's block pattern (the accurate mode's default) and its whitespace split.
_HAN_BLOCK = re.compile("([\u4e00-\u9fd5a-zA-Z0-9+#&\\._%\\-]+)")
_SKIP = re.compile("(\r\n|\\s)")
_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")

_lock = threading.Lock()
_dictionary: tuple[dict[str, int], float] | None = None
#: word -> log(freq) - log(total), filled as words are met (bounded by the dictionary's size).
_log_prob: dict[str, float] = {}
#: Words of the dictionary (entries with a frequency): the most ``_log_prob`` can hold; counted when first asked.
_dictionary_words = 0


def _load() -> tuple[dict[str, int], float]:
    """jieba's prefix dictionary (every word and every word prefix -> frequency, 0 for prefixes only) and
    log(total frequency), initialised once, quietly."""
    global _dictionary
    if _dictionary is None:
        with _lock:
            if _dictionary is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                tokenizer: Any = jieba.dt
                _dictionary = (tokenizer.FREQ, math.log(tokenizer.total))
    return _dictionary


def word_cache_usage() -> tuple[int, int]:
    """(words whose log-probability is remembered, the most there can be): the cache fills as a crawl meets more
    of the dictionary, and stops at its size. The size is counted at the first call after the dictionary is loaded
    (a scrape), not at start-up; (0, 0) before any text was cut."""
    global _dictionary_words
    if _dictionary is not None and not _dictionary_words:
        _dictionary_words = sum(1 for count in _dictionary[0].values() if count)
    return len(_log_prob), _dictionary_words


def cut(text: str) -> list[str]:
    """The words of ``jieba.lcut(text, HMM=False)``; see the module docstring."""
    words: list[str] = []
    for block in _HAN_BLOCK.split(text):
        if not block:
            continue
        if _HAN_BLOCK.match(block):
            _cut_block(block, words)
        else:
            for piece in _SKIP.split(block):
                if _SKIP.match(piece):
                    words.append(piece)
                else:
                    words.extend(piece)
    return words


def _cut_block(block: str, words: list[str]) -> None:
    """Append the maximum-probability route through one block of Han/ASCII characters."""
    freq, log_total = _load()
    log_prob = _log_prob
    n = len(block)
    # best[i]: the route's log-probability from i to the end; end[i]: where the first word from i ends.
    best: list[float] = [0.0] * (n + 1)
    end = list(range(n + 1))
    alone = 0.0 - log_total  # a character that starts no word: log(1) - log(total), as jieba computes it
    for start in range(n - 1, -1, -1):
        top = -math.inf
        top_end = -1
        stop = start
        fragment = block[start]
        while fragment in freq:
            count = freq[fragment]
            if count:
                weight = log_prob.get(fragment)
                if weight is None:
                    weight = log_prob[fragment] = math.log(count) - log_total
                score = weight + best[stop + 1]
                if score >= top:  # equal scores: the later end (longer word) wins, like jieba's max over (score, end)
                    top, top_end = score, stop
            stop += 1
            if stop >= n:
                break
            fragment = block[start : stop + 1]
        if top_end < 0:
            top, top_end = alone + best[start + 1], start
        best[start] = top
        end[start] = top_end
    position = 0
    letters = ""
    while position < n:
        following = end[position] + 1
        word = block[position:following]
        if following - position == 1 and word in _ASCII_ALNUM:
            letters += word
        else:
            if letters:
                words.append(letters)
                letters = ""
            words.append(word)
        position = following
    if letters:
        words.append(letters)

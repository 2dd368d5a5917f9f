"""``icecrawler bench fingerprint``: speed of ``shhd.fingerprint`` (jieba words + 64-bit simhash) on 45-post
windows, against the ``simhash`` package (1e0ng/simhash, md5 features) and a pure-Python Charikar loop on the same
tokens, and of ``shhd.segment.cut`` against ``jieba.lcut`` (HMM off) on the same texts, measured in the same run.
Writes docs/bench/fingerprint.json."""

from __future__ import annotations

import argparse
import time
import timeit
from collections import Counter
from collections.abc import Callable

from bench import write_figures
from bench.revisit.content import ContentModel
from shhd.fingerprint import clear_token_cache, fingerprint_texts, fingerprint_tokens, token_hash, tokenize
from shhd.segment import cut

WINDOW = 45


def _pure_python(tokens: list[str]) -> int:
    """Baseline: the textbook Charikar loop, bit by bit in Python, same features and hashes as shhd."""
    v = [0] * 64
    for tok, w in Counter(tokens).items():
        h = token_hash(tok)
        for i in range(64):
            v[i] += w if (h >> i) & 1 else -w
    return sum(1 << i for i in range(64) if v[i] > 0)


def _simhash_package(tokens: list[str]) -> int:
    """Baseline: the ``simhash`` package (md5 per feature), fed the same token weights."""
    from simhash import Simhash

    return int(Simhash(Counter(tokens)).value)


def _time(fn: Callable[[], object], repeat: int) -> float:
    """Best-of-3 mean CPU seconds per call (process time, so other jobs on a shared machine do not count)."""
    return min(timeit.Timer(fn, timer=time.process_time).repeat(3, repeat)) / repeat


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icecrawler bench fingerprint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=40, help="distinct 45-post windows to time (default 40)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    content = ContentModel(seed=1, window=WINDOW)
    windows = [[content.item_text(w, k) for k in range(WINDOW)] for w in range(args.windows)]
    tokenize("预热")  # jieba's one-off dictionary load is not part of the per-window cost
    token_lists = [[t for text in win for t in tokenize(text)] for win in windows]
    n_tokens = sum(len(t) for t in token_lists)
    rows: list[tuple[str, float]] = []

    # Cold = a first visit: the per-text token cache is cleared before each pass (re-crawls hit it: "warm").
    def cold_fingerprints() -> list[int]:
        clear_token_cache()
        return [fingerprint_texts(w) for w in windows]

    def cold_tokens() -> list[list[str]]:
        clear_token_cache()
        return [tokenize(x) for w in windows for x in w]

    t_full = _time(cold_fingerprints, 1) / len(windows)
    rows.append(("shhd fingerprint_texts (jieba + simhash)", t_full))
    t_tok = _time(cold_tokens, 1) / len(windows)
    rows.append(("  of which tokenize (token cache within a pass)", t_tok))
    texts = [x for w in windows for x in w]
    t_cut = _time(lambda: [cut(x) for x in texts], 1) / len(windows)
    rows.append(("segmenting every text, no cache: shhd.segment", t_cut))
    import jieba

    if any(cut(x) != jieba.lcut(x, HMM=False) for x in texts):
        raise AssertionError("shhd.segment.cut differs from jieba.lcut(HMM=False)")
    t_jieba = _time(lambda: [jieba.lcut(x, HMM=False) for x in texts], 1) / len(windows)
    rows.append(("  baseline: jieba.lcut (HMM off), same texts", t_jieba))
    for window in windows:  # fills the cache for the warm row
        fingerprint_texts(window)
    t_warm = _time(lambda: [fingerprint_texts(w) for w in windows], 3) / len(windows)
    rows.append(("shhd fingerprint_texts, re-crawl (token cache)", t_warm))
    t_hash = _time(lambda: [fingerprint_tokens(t) for t in token_lists], 3) / len(windows)
    rows.append(("shhd fingerprint_tokens (numpy simhash)", t_hash))
    t_pkg = _time(lambda: [_simhash_package(t) for t in token_lists], 1) / len(windows)
    rows.append(("baseline: simhash package", t_pkg))
    t_py = _time(lambda: [_pure_python(t) for t in token_lists], 1) / len(windows)
    rows.append(("baseline: pure-Python Charikar loop", t_py))
    assert all(_pure_python(t) == fingerprint_tokens(t) for t in token_lists[:5])
    per_window = n_tokens / len(windows)
    print(f"{len(windows)} windows of {WINDOW} posts, {per_window:.0f} tokens per window")
    print(f"{'method':48s} {'ms/window':>10s} {'tokens/s':>12s}")
    for name, sec in rows:
        print(f"{name:48s} {sec * 1e3:10.3f} {per_window / sec:12.0f}")
    head = {
        "window_posts": WINDOW,
        "tokens_per_window": round(per_window, 1),
        "shhd_full_ms_per_window": round(t_full * 1e3, 3),
        "shhd_tokenize_ms_per_window": round(t_tok * 1e3, 3),
        "segment_cut_ms_per_window": round(t_cut * 1e3, 3),
        "jieba_lcut_ms_per_window": round(t_jieba * 1e3, 3),
        "segment_speedup_vs_jieba_x": round(t_jieba / t_cut, 2),
        "shhd_full_cached_ms_per_window": round(t_warm * 1e3, 3),
        "shhd_simhash_ms_per_window": round(t_hash * 1e3, 3),
        "shhd_full_tokens_per_s": round(per_window / t_full),
        "shhd_simhash_tokens_per_s": round(per_window / t_hash),
        "simhash_package_ms_per_window": round(t_pkg * 1e3, 3),
        "pure_python_ms_per_window": round(t_py * 1e3, 3),
        "speedup_vs_simhash_package_x": round(t_pkg / t_hash, 2),
        "speedup_vs_pure_python_x": round(t_py / t_hash, 2),
    }
    if not args.no_write:
        write_figures("fingerprint", head)
    return 0

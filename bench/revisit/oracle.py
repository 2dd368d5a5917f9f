"""Lower bounds for the revisit benchmark (docs/REVISIT.md).

* O1 ``offline_lag``: the clairvoyant minimum total capture lag of the given items with at most K fetches, over
  all pages together. Fetches sit at item arrival instants (moving one earlier, to the latest arrival it covers,
  never adds lag). Per page the penalised problem min(lag + μ * fetches) is a 1-D DP,

      dp[j+1] = min_{i<=j} dp[i] + (j-i+1) a_j - (S_{j+1} - S_i) + μ,

  solved in O(n) with a monotone convex-hull trick (slopes -i fall, queries a_j rise). One μ is shared by all pages
  and bisected; pen(μ) - μK is a lower bound for every μ (weak duality) and exact where lag(K) is convex.
  Items after a page's last fetch are censored at ``end``.
* O2 ``sqrt_bound``: mean lag per item of periodic crawling with KNOWN mean rates and the square-root split,
  (Σ√λ)² / (2 B Σλ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _page_penalised(arrivals: Sequence[float], mu: float, end: float) -> tuple[float, int]:
    """min over fetch sets of (total lag + mu * fetches) on one page, and the fetch count of that optimum."""
    a = [float(x) for x in arrivals]
    n = len(a)
    if n == 0:
        return 0.0, 0
    pref = [0.0] * (n + 1)
    for k, x in enumerate(a):
        pref[k + 1] = pref[k] + x
    dp = [0.0] * (n + 1)
    cnt = [0] * (n + 1)
    # Lines y = m*x + b with m = -i, b = dp[i] + S_i; the cost of fetching at a_j covering items i..j is
    # line_i(a_j) + (j+1) a_j - S_{j+1}.
    hull: list[tuple[float, float, int]] = []  # (m, b, i)
    head = 0

    def bad(l1: tuple[float, float, int], l2: tuple[float, float, int], l3: tuple[float, float, int]) -> bool:
        # l2 is never the strict minimum once l3 (smaller slope) is added.
        return (l3[1] - l1[1]) * (l1[0] - l2[0]) <= (l2[1] - l1[1]) * (l1[0] - l3[0])

    def add(i: int) -> None:
        line = (-float(i), dp[i] + pref[i], i)
        while len(hull) - head >= 2 and bad(hull[-2], hull[-1], line):
            hull.pop()
        hull.append(line)

    add(0)
    for j in range(n):
        x = a[j]
        while len(hull) - head >= 2 and hull[head + 1][0] * x + hull[head + 1][1] <= hull[head][0] * x + hull[head][1]:
            head += 1
        head = min(head, len(hull) - 1)
        m, b, i = hull[head]
        dp[j + 1] = m * x + b + (j + 1) * x - pref[j + 1] + mu
        cnt[j + 1] = cnt[i] + 1
        add(j + 1)
    best, best_cnt = math.inf, 0
    for i in range(n + 1):  # items i..n-1 never fetched: censored at end
        v = dp[i] + (n - i) * end - (pref[n] - pref[i])
        if v < best or (v == best and cnt[i] < best_cnt):
            best, best_cnt = v, cnt[i]
    return best, best_cnt


def offline_lag(pages: Sequence[Sequence[float]], fetches: int, end: float, iterations: int = 40) -> float:
    """Clairvoyant lower bound on the TOTAL lag of all items (censored at ``end``) with ``fetches`` fetches."""
    total_items = sum(len(p) for p in pages)
    if total_items == 0:
        return 0.0
    if fetches >= total_items:
        return 0.0
    lo, hi = 0.0, end * total_items + 1.0
    best = 0.0
    for _ in range(iterations):
        mu = 0.5 * (lo + hi)
        pen, cnt = 0.0, 0
        for p in pages:
            v, c = _page_penalised(p, mu, end)
            pen += v
            cnt += c
        best = max(best, pen - mu * fetches)
        if cnt > fetches:
            lo = mu
        else:
            hi = mu
    return best


def brute_force_lag(pages: Sequence[Sequence[float]], fetches: int, end: float) -> float:
    """Exhaustive minimum total lag over all choices of at most ``fetches`` arrival instants (tiny inputs only)."""
    from itertools import combinations

    slots = [(float(t), w) for w, p in enumerate(pages) for t in p]
    best = math.inf
    for k in range(min(fetches, len(slots)) + 1):
        for chosen in combinations(range(len(slots)), k):
            per_page: dict[int, list[float]] = {}
            for c in chosen:
                per_page.setdefault(slots[c][1], []).append(slots[c][0])
            total = 0.0
            for w, p in enumerate(pages):
                times = sorted(per_page.get(w, []))
                for t in p:
                    nxt = next((f for f in times if f >= t), end)
                    total += nxt - float(t)
            best = min(best, total)
    return best


def sqrt_bound(rates: Sequence[float], budget_per_s: float) -> float:
    """Known-rate square-root-rule mean lag per item, (Σ√λ)² / (2 B Σλ) (pages with λ = 0 get nothing)."""
    lam = np.asarray([r for r in rates if r > 0], dtype=float)
    if lam.size == 0:
        return 0.0
    return float(np.sqrt(lam).sum() ** 2 / (2 * budget_per_s * lam.sum()))

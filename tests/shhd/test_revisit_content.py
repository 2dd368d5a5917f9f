"""The revisit simulator fingerprints a page exactly as the crawler would fingerprint its texts (docs/REVISIT.md
says so): the memoised token path and ``fingerprint_texts`` of the page's texts agree."""

from __future__ import annotations

import pytest

from bench.revisit.content import ContentModel
from shhd.fingerprint import fingerprint_texts


@pytest.mark.parametrize(
    ("window", "chrome_words", "noise_block"), [(10, 0, False), (10, 300, True), (10_000, 0, True)]
)
def test_the_simulated_fingerprint_is_fingerprint_texts_of_the_page(
    window: int, chrome_words: int, noise_block: bool
) -> None:
    model = ContentModel(seed=7, window=window, chrome_words=chrome_words, noise_block=noise_block)
    for n_items, noise_version in [(1, 0), (5, 2), (12, 3)]:
        texts = model.page_texts(page=3, n_items=n_items, noise_version=noise_version)
        assert len(texts) == min(n_items, window) + (1 if chrome_words else 0) + (1 if noise_block else 0)
        assert model.fingerprint(3, n_items, noise_version) == fingerprint_texts(texts)

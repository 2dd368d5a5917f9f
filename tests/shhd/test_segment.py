"""shhd.segment.cut gives exactly jieba's accurate-mode words without HMM (what fingerprints were built from)."""

from __future__ import annotations

import logging
import random

import jieba
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.content import make_post, make_review
from shhd.segment import cut

jieba.setLogLevel(logging.WARNING)

#: Han characters (common and rare), jieba's block punctuation, ASCII, full-width forms, CJK punctuation,
#: whitespace incl. \r\n, emoji and other scripts: every branch of the segmenter.
_ALPHABET = st.sampled_from(
    [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
    + list("的了是在我有他这中大来上个国到说们为子和你地出道也时年")
    + list("abcXYZ0123456789+#&._%- \t\n\r\r\n，。！？、“”《》😀①ⅱ﹏ＡＢ한ñé\u3000\u9fd5\u9fd6")
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_same_words_as_jieba_on_any_text(text: str) -> None:
    assert cut(text) == jieba.lcut(text, HMM=False)


def test_same_words_as_jieba_on_posts_and_reviews() -> None:
    rng = random.Random(7)
    texts = [make_post(rng, 1000 + n, "user", 0, n, 1_700_000_000_000, long_text=n % 3 == 0).text for n in range(300)]
    texts += [make_review(rng, f"p{n}", 0, n, 1_700_000_000_000, with_id=True).text for n in range(300)]
    texts += [
        "这个商品质量很好，物流也快！推荐购买 iPhone15 Pro-Max 2024年",
        "",
        "   ",
        "\r\n\r\n",
        "ABC123 abc 1.5%",
        "转发微博 //@某人: 哈哈哈😀😀 http://t.cn/A6abcd #话题#",
    ]
    for text in texts:
        assert cut(text) == jieba.lcut(text, HMM=False), text

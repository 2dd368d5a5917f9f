"""Bytes to text, JSON and soup, the same way for every source.

Bodies are utf-8 with a GB18030 fallback (GBK pages that claim utf-8, old ECSHOP/JD installs), JSONP is
unwrapped by hand (no regex backtracking on megabyte bodies), and every malformed input becomes a
``ParseError`` here so the sources never leak a ``ValueError``/``RecursionError`` to the runtime.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from bs4 import BeautifulSoup, Tag

from icecrawler.errors import ParseError
from icecrawler.models import Post

__all__ = [
    "as_dict",
    "decode_body",
    "describe_unreadable",
    "drop_leading_boms",
    "first_text",
    "html_text",
    "html_texts",
    "is_tag",
    "is_utf8",
    "legacy_charset",
    "load_bytewise_json",
    "load_json",
    "make_soup",
    "strip_jsonp",
    "strip_php_notices",
    "with_html",
]


def decode_body(body: bytes, legacy: str = "gb18030") -> str:
    """utf-8 (leading BOMs dropped: ``drop_leading_boms``), else ``legacy``: GB18030 unless told (a superset of GBK that
    decodes any byte string), or what ``legacy_charset`` found a page declaring."""
    body = drop_leading_boms(body)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode(legacy, errors="replace")


#: A charset declaration (``Content-Type`` header, ``<meta>``), in bytes so that a page's own can be read undecoded.
_CHARSET_RE = re.compile(rb"charset\s*=\s*[\"'\\]*\s*([A-Za-z0-9_-]{1,20})", re.IGNORECASE)
#: The names a Big5 page declares itself by.
_BIG5_NAMES = frozenset({b"big5", b"big-5", b"cp950", b"x-x-big5", b"big5-hkscs"})
#: How far into a body ``legacy_charset`` looks for its declaration (a ``<head>``, a JSON envelope's first field).
_DECLARATION_SPAN = 4096


def legacy_charset(body: bytes, content_type: str = "") -> str:
    """The codec for a body that is not UTF-8: Big5 (Python's ``big5hkscs``, a superset) when the body's declaration
    says Big5, as ECSHOP's Big5 edition does, else GB18030. The declaration is the ``Content-Type`` header's, else the
    first one in the body's first bytes (a ``<meta>``, the HTML inside a JSON envelope), as browsers take it: a later
    ``charset=big5`` (a buyer's review quoting one) is text, not the page's. Only Big5 is taken at its word: pages that
    declare UTF-8 or nothing are GBK often enough (Weibo's)."""
    declared = _CHARSET_RE.search(content_type.encode("ascii", "replace")) or _CHARSET_RE.search(
        body[:_DECLARATION_SPAN]
    )
    return "big5hkscs" if declared is not None and declared[1].lower() in _BIG5_NAMES else "gb18030"


def strip_jsonp(text: str) -> str:
    """``callback({...});`` → ``{...}``; plain JSON passes through unchanged."""
    stripped = text.strip()
    if not stripped or stripped[0] in "{[":
        return stripped
    open_at = stripped.find("(")
    close_at = stripped.rfind(")")
    name = stripped[:open_at].strip()
    if open_at <= 0 or close_at < open_at or not name.replace("_", "a").replace(".", "a").replace("$", "a").isalnum():
        return stripped
    tail = stripped[close_at + 1 :].strip()
    if tail not in ("", ";"):
        return stripped
    return stripped[open_at + 1 : close_at].strip()


#: One diagnostic a PHP site running with ``display_errors`` prints into its answer: with ``html_errors``
#: ``<br />\n<b>Deprecated</b>:  preg_replace(): ... in <b>/x/y.php</b> on line <b>300</b><br />``, else the same
#: words plainly. Errors that stop the script (``Fatal error``) are not in it: no answer follows them.
_PHP_NOTICE_RE = re.compile(
    r"\s*(?:<br\s*/?>\s*)?(?:<b>)?(?:PHP )?(?:Notice|Warning|Deprecated|Strict Standards)(?:</b>)?:"
    r"[^\n]{0,2000}? on line (?:<b>)?\d{1,9}(?:</b>)?(?:\s*<br\s*/?>)?\s*"
)


_JSON = json.JSONDecoder()

#: UTF-8's byte order mark.
_BOM = b"\xef\xbb\xbf"
#: ``_PHP_NOTICE_RE`` and whitespace on undecoded bytes (both patterns are ASCII).
_PHP_NOTICE_BYTES_RE = re.compile(_PHP_NOTICE_RE.pattern.encode("ascii"))
_SPACE_BYTES_RE = re.compile(rb"\s+")


def drop_leading_boms(body: bytes) -> bytes:
    """``body`` without the UTF-8 byte order marks in its lead (the whitespace and PHP notices before the content).
    Why: a PHP site prints the BOM of every file it includes that was saved "with BOM", so an answer can start with
    several, between notices too; one dropped by the decoder leaves the next in the text, before the ``{`` of a JSON
    answer. On bytes, so a GBK answer loses them too (decoded as GB18030 the BOM's bytes swallow the ``{``)."""
    if _BOM not in body:
        return body
    kept: list[bytes] = []
    at = 0
    while at < len(body):  # every turn moves ``at`` on, or ends the loop
        if body.startswith(_BOM, at):
            at += len(_BOM)
            continue
        lead = _PHP_NOTICE_BYTES_RE.match(body, at) or _SPACE_BYTES_RE.match(body, at)
        if lead is None or lead.end() == at:
            break
        kept.append(body[at : lead.end()])
        at = lead.end()
    return b"".join(kept) + body[at:] if at else body


def _after_notices(text: str, at: int = 0) -> int:
    """Where the run of PHP notices starting at ``at`` in ``text`` ends (``at`` itself when none starts there)."""
    while (match := _PHP_NOTICE_RE.match(text, at)) and match.end() > at:
        at = match.end()
    return at


def strip_php_notices(text: str) -> str:
    """``text`` without the PHP notices printed before it, nor (when what is left is a JSON object) after it: a shop
    on a newer PHP than its code was written for prints them into its JSON answers too."""
    text = text[_after_notices(text) :].strip()
    if not text.startswith("{") or text.endswith("}"):
        return text  # nothing after the object: no need to find where it ends (the caller parses it once)
    try:
        end = _JSON.raw_decode(text)[1]  # where the object ends: a notice after it may hold "}" ({closure}())
    except (ValueError, RecursionError):
        return text  # truncated or not JSON: left for the caller's error
    return text[:end] if _after_notices(text, end) == len(text) else text


def as_dict(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else {} (every field of an answer may have the wrong type)."""
    return value if isinstance(value, dict) else {}


def first_text(doc: dict[str, Any], keys: Sequence[str]) -> str:
    """The value of the first of ``keys`` that ``doc`` holds as non-blank text ("" when none is): answers put one
    thing under several keys (a refusal's words as ``msg``, ``message``…; a review's text as ``content``…)."""
    return next((value for key in keys if isinstance(value := doc.get(key), str) and value.strip()), "")


def load_json(text: str, *, what: str, http_status: int = 0) -> Any:
    """``json.loads`` with every failure (syntax, nesting depth, huge ints) as a ``ParseError`` (carrying the
    answer's HTTP status, like every other refusal of it); one that ran out of text says the answer was cut short, or
    empty."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        cut = isinstance(exc, json.JSONDecodeError) and _ran_out(exc, text.rstrip())
        how = ""
        if cut:
            how = f"; cut short after {len(text)} characters" if text.strip() else "; the text is empty"
        raise ParseError(
            f"{what}: not JSON ({type(exc).__name__}: {str(exc)[:80]}){how}",
            error_class="bad-json",
            http_status=http_status,
        ) from exc


#: Leading bytes of compressed bodies, as a server sends them without a ``Content-Encoding`` the HTTP layer undoes.
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"))
#: A JSONP call's opening (``callback(`` then a JSON value).
_JSONP_OPEN_RE = re.compile(r"^[\w$.]{1,100}\s*\(\s*[\[{]")
#: How much of a body ``describe_unreadable`` looks at for NUL bytes.
_SNIFF_SPAN = 256
#: Leading bytes of the images a site may send in place of an answer (a captcha, a placeholder, a CDN's error image).
_IMAGES = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"))


def describe_unreadable(body: bytes) -> str:
    """What an answer no parser could read is, in words for its error ("" when nothing specific): empty, compressed
    bytes, an image (PNG, JPEG, GIF, WebP by their magic numbers), UTF-16 text (by its byte order mark or its NUL
    bytes), other binary bytes, or JSON / a JSONP call cut short. Why: "not a JSON object" alone sent an operator to
    the saved bytes to find out which."""
    if not body.strip():
        return "the body is empty"
    for magic, name in _COMPRESSED:
        if body.startswith(magic):
            return f"the body is {name}-compressed bytes (sent without a Content-Encoding the HTTP layer undoes)"
    image = next((name for magic, name in _IMAGES if body.startswith(magic)), "")
    if image or (body.startswith(b"RIFF") and body[8:12] == b"WEBP"):
        return f"the body is an image ({image or 'WebP'}), not an answer"
    head = body[:_SNIFF_SPAN]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or _alternating_nuls(head):
        return "the body is UTF-16 text, which no site of ours sends"
    if b"\x00" in head:
        return "the body is binary bytes"
    text = decode_body(body).strip()
    if _JSONP_OPEN_RE.match(text) and not text.rstrip(";").rstrip().endswith(")"):
        return f"a JSONP call cut short after {len(body)} bytes"
    if text[:1] in "{[":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            if _ran_out(exc, text):
                return f"JSON cut short after {len(body)} bytes"
        except (ValueError, RecursionError):
            return ""
    return ""


def _ran_out(exc: json.JSONDecodeError, text: str) -> bool:
    """Whether the JSON ended before its value did: the error is at its end, or in a string never closed."""
    return exc.pos >= len(text) or exc.msg.startswith("Unterminated string")


#: ``_alternating_nuls``: at least this share of NULs at one parity, at most this share at the other.
_UTF16_NULS, _UTF16_OTHER_NULS = 0.9, 0.1


def _alternating_nuls(head: bytes) -> bool:
    """Whether NUL bytes sit at every other position and (almost) nowhere else, as ASCII text in UTF-16 has them
    (either byte order). Binary data with NULs at both parities (an image's headers, a run of zeros) is not."""
    even, odd = head[0::2], head[1::2]
    return bool(odd) and any(
        nuls.count(0) >= len(nuls) * _UTF16_NULS and other.count(0) <= len(other) * _UTF16_OTHER_NULS
        for nuls, other in ((even, odd), (odd, even))
    )


#: How deep ``load_bytewise_json`` decodes strings inside nested objects (the answers it reads are flat).
_TRANSCODE_DEPTH = 32


def is_utf8(body: bytes) -> bool:
    """Whether ``body`` is valid UTF-8 (a BOM allowed)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def load_bytewise_json(body: bytes, *, what: str, http_status: int = 0, charset: str = "gb18030") -> Any:
    """JSON that a PHP site on a legacy charset wrote byte by byte (ECSHOP's ``cls_json`` for its GBK editions, which
    escapes backslashes, quotes and control bytes wherever they occur): parsed on its bytes, each string then decoded
    from ``charset``. Decoded as text first, a GBK character whose second byte is 0x5C (誠, 運, 淺… 118 of them) stands
    beside the backslash the encoder doubled: an invalid escape, or one that swallows the closing quote. PHP notices
    around it are dropped as ``strip_php_notices`` does."""
    text = strip_php_notices(drop_leading_boms(body).decode("latin-1"))  # one character per byte: the encoder's view
    return _transcode(load_json(text, what=what, http_status=http_status), charset, _TRANSCODE_DEPTH)


def _transcode(value: Any, charset: str, depth: int) -> Any:
    """``value`` with every string (keys too) read back as bytes and decoded from ``charset``; a string holding a
    ``\\u`` escape beyond latin-1 is text already and stays as it is."""
    if isinstance(value, str):
        try:
            return value.encode("latin-1").decode(charset, errors="replace")
        except UnicodeEncodeError:
            return value
    if depth <= 0:
        return value
    if isinstance(value, dict):
        return {_transcode(key, charset, 0): _transcode(item, charset, depth - 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_transcode(item, charset, depth - 1) for item in value]
    return value


def make_soup(markup: str) -> BeautifulSoup:
    """An lxml soup of ``markup``. The ``<html><body>`` prefix makes bs4's heuristics (markup that looks
    like a URL, a filename or XML) stay quiet, so fragments and garbage never raise warnings."""
    from bs4 import BeautifulSoup

    return BeautifulSoup("<html><body>" + markup.replace("\x00", ""), "lxml")


def is_tag(node: object) -> TypeGuard[Tag]:
    """``isinstance(node, bs4.Tag)``, without importing bs4 before a page is parsed (a tag exists only then)."""
    from bs4 import Tag

    return isinstance(node, Tag)


#: Invisible filler (Weibo pads posts with it) that ``html_text`` drops; joiners (U+200C/U+200D) are kept, emoji
#: sequences need them.
ZERO_WIDTH_SPACE = "\u200b"


def html_text(node: Tag, *, keep_zero_width: bool = False) -> str:
    """Visible text of an HTML fragment: ``<br>`` → newline, emoticon ``<img alt="[doge]">`` → its alt, zero-width
    spaces gone (``keep_zero_width``: the text as it was read before they were dropped, for ids derived from it)."""
    dropped = "" if keep_zero_width else ZERO_WIDTH_SPACE
    parts: list[str] = []
    for element in node.descendants:
        if is_tag(element):
            if element.name == "br":
                parts.append("\n")
            elif element.name == "img":
                alt = element.get("alt")
                if isinstance(alt, str):
                    parts.append(alt)
        elif type(element).__name__ == "NavigableString":
            text = str(element).replace(dropped, "") if dropped else str(element)
            parts.append(" ".join(text.split("\n")))  # source newlines are whitespace in HTML
    lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
    return "\n".join(lines).strip()


#: Class of the wrapper ``html_texts`` puts around each fragment (a name no real page uses).
_WRAPPER = "icecrawler-fragment"
#: Tags that cannot close or escape a surrounding ``<div>`` (what post markup is made of: links, emoticons, breaks).
_INLINE_TAGS = frozenset(
    {
        "a",
        "b",
        "big",
        "br",
        "code",
        "del",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "s",
        "small",
        "span",
        "strong",
        "sub",
        "sup",
        "u",
        "wbr",
    }
)
_TAG_START = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)?")


def _inline_only(fragment: str) -> bool:
    """True when every tag in ``fragment`` is a complete inline one (no comments, doctypes, blocks, raw-text tags,
    unfinished tags or open quotes)."""
    for match in _TAG_START.finditer(fragment):
        name = match[2]
        if name is None:
            if match[1] or fragment.startswith(("<!", "<?"), match.start()):
                return False
            continue
        if name.lower() not in _INLINE_TAGS:
            return False
        end = fragment.find(">", match.end())
        inside = fragment[match.end() : end]
        if end < 0 or "<" in inside or inside.count('"') % 2 or inside.count("'") % 2:
            return False  # an unfinished tag or quote would swallow the next fragment's wrapper
    return True


def html_texts(fragments: Sequence[str]) -> list[str]:
    """``html_text`` of each fragment (``""`` for an empty one), from ONE soup of all of them.

    Why: a soup has a large fixed cost (bs4 builds a new lxml parser per document; ``icecrawler bench client``
    measures parse CPU per page against a decode-only baseline), and a timeline page
    holds 10-20 short post fragments. Each fragment is wrapped in its own ``<div>``; when the joined markup does
    not split back into exactly one wrapper per fragment (a fragment with a stray ``</div>``, ``</body>``, an
    unclosed ``<div>``...), or when a fragment holds anything but inline tags, every fragment is parsed on its
    own instead, so the result never depends on the neighbours (tests/client/test_fuzz.py checks it)."""
    wanted = [i for i, fragment in enumerate(fragments) if fragment]
    texts = [""] * len(fragments)
    if len(wanted) > 1 and all(_inline_only(fragments[i]) for i in wanted):
        soup = make_soup("".join(f'<div class="{_WRAPPER}">{fragments[i]}</div>' for i in wanted))
        children = list(soup.body.children) if soup.body is not None else []
        wrappers = [
            node
            for node in children
            if is_tag(node)
            and node.name == "div"
            and node.get("class") == [_WRAPPER]
            and node.find("div", class_=_WRAPPER) is None
        ]
        if len(wrappers) == len(children) == len(wanted):
            for i, node in zip(wanted, wrappers, strict=True):
                texts[i] = html_text(node)
            return texts
    for i in wanted:
        texts[i] = html_text(make_soup(fragments[i]))
    return texts


def with_html(post: Post, html: str) -> Post:
    """Give ``post`` a new HTML body (a long text's full version) and the text derived from it, in place. An empty
    one leaves the post as it is: a site that answers a long-text request with nothing must not wipe the text it
    showed on the timeline."""
    if not html.strip():
        return post
    post.html = html
    post.text = html_text(make_soup(html))
    return post

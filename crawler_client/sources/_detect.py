"""Ban, login, busy and frozen detection on the raw response, before any decoding.

Weibo's interstitials are GBK bytes that often *declare* utf-8, so decoded text cannot be trusted: every
marker is encoded in both utf-8 and GBK and searched in the raw body. Marker scans only run where a source
did not find its expected structure (a post may well say "网络繁忙"); the HTTP status and final URL checks
always run first, because they never come from user content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from urllib.parse import SplitResult, urlsplit

from crawler_client.sources._decode import describe_unreadable
from crawler_client.sources.base import FetchedPage
from icecrawler.errors import FetchError, ParseError
from icecrawler.models import Outcome

__all__ = [
    "BANNED_STATUSES",
    "ECSHOP_MARKERS",
    "LONGEST_RETRY_AFTER_S",
    "TOO_FREQUENT_MARKERS",
    "WEIBO_MARKERS",
    "Marker",
    "check_final_url",
    "check_http",
    "check_not_cut_short",
    "fail",
    "header",
    "landing_error",
    "redirect_target",
    "retry_after_seconds",
    "scan_markers",
    "sent_to_error",
    "unparsable",
]

#: HTTP statuses the sites use to refuse a crawler (418 teapot, 432 and 414 under load, 403).
BANNED_STATUSES = frozenset({403, 414, 418, 432})


@dataclass(frozen=True)
class Marker:
    """One byte marker: ``text`` is searched in the body as utf-8, as GBK and as Big5."""

    text: str
    outcome: Outcome
    error_class: str

    def variants(self) -> tuple[bytes, ...]:
        """The marker's utf-8, GBK and Big5 bytes, where it has them (one form when they coincide, e.g. ASCII). Big5:
        a traditional marker in a Big5 shop's page (ECSHOP's Big5 edition); simplified text has no Big5 form."""
        forms = {self.text.encode("utf-8")}
        for legacy in ("gbk", "big5"):
            try:
                forms.add(self.text.encode(legacy))
            except UnicodeEncodeError:
                pass
        return tuple(forms)


#: Failed visits in a row after which an empty page before the pager's last is the end of what the site shows, not
#: a throttled answer: a pager may count items nobody is shown (Weibo's posts of an account that shows only its last
#: half year or hides some, JD's folded reviews past the pages it serves), and every visit then meets the same empty
#: page; Busy for ever would fail each crawl, keep its cursor and walk the whole list again. The JSON feeds' end before
#: the cursor (``_weibo.END_AFTER_CURSOR_RETRIES``) waits longer, six: they meet an early end only once the cursor's
#: own post is out of view, where a pager that counts hidden items meets its empty page at every deep walk.
EMPTY_PAGE_RETRIES = 3


def check_not_cut_short(
    items: int, page: int, pages: int | None, *, attempts: int, site: str, http_status: int
) -> None:
    """An empty page (1-based ``page``) of a list that has ``pages`` pages is a throttled answer when more pages
    follow it: taken for the end of the list, the crawl would succeed and its new cursor would pass over the items
    it had not reached. Busy fails the crawl instead (retried with the task's backoff, cursor kept), for
    ``EMPTY_PAGE_RETRIES`` failed visits in a row (the task's ``attempts``); then the page is the end. The first
    page (an item without reviews) and the last may be empty."""
    if items or page <= 1 or pages is None or page >= pages or attempts >= EMPTY_PAGE_RETRIES:
        return
    raise fail(
        Outcome.Busy,
        f"{site}: page {page} of {pages} is empty (a throttled answer, not the end of the list)",
        error_class=f"{site.lower()}-empty-page",
        http_status=http_status,
    )


def fail(
    outcome: Outcome, message: str, *, error_class: str = "", http_status: int = 0, retry_after_s: float = 0.0
) -> FetchError:
    """Build (not raise) the classified error, so call sites read ``raise fail(...)``."""
    return FetchError(
        message,
        outcome=outcome,
        http_status=http_status,
        error_class=error_class or outcome.value,
        retry_after_s=retry_after_s,
    )


#: The longest wait a ``Retry-After`` is read as: 2**31 seconds, what HTTP caches take a delta-seconds too large to
#: hold for (RFC 9111, 1.2.2). 400 digits read as ``inf``, which the scheduler refuses (``retryAfterS`` must be
#: finite): the report was dropped and the host never held. The scheduler cuts the hold to its longest period.
LONGEST_RETRY_AFTER_S = 2.0**31


def retry_after_seconds(value: str, now_ms: int) -> float:
    """``Retry-After`` as seconds: delta-seconds (digits only, as HTTP defines them: no ``inf``, ``1e9`` or
    ``-3``) or an HTTP-date (resolved against ``now_ms``); 0 if junk, at most ``LONGEST_RETRY_AFTER_S``.

    A response with two ``Retry-After`` headers reaches us as one value joined by ", " (urllib3 merges repeated
    headers); each reading counts and the longest wait holds (the joined text alone reads as junk, or, for two
    dates, as the first)."""
    readings = [_one_retry_after(part, now_ms) for part in _joined_values(value)]
    return max((reading for reading in readings if reading is not None), default=0.0)


def _one_retry_after(value: str, now_ms: int) -> float | None:
    """One header value's wait, or None when it is neither delta-seconds nor an HTTP-date."""
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), LONGEST_RETRY_AFTER_S)
    from email.utils import parsedate_to_datetime  # rarely needed; email.utils is slow to import

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now_ms / 1000), LONGEST_RETRY_AFTER_S)


#: Weekday names that open an HTTP-date (IMF-fixdate and RFC 850), whose own comma is not a list's.
_WEEKDAYS = frozenset(
    {"mon", "tue", "wed", "thu", "fri", "sat", "sun"}
    | {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)
#: Joined values read at most: a site's header of thousands of commas costs no more than a few.
_MOST_JOINED_VALUES = 8


def _joined_values(value: str) -> list[str]:
    """Split values joined by commas, keeping an HTTP-date's own comma (``Thu, 01 Jan 1970 ...``) inside it; the
    first ``_MOST_JOINED_VALUES`` only."""
    parts = value.split(",", 2 * _MOST_JOINED_VALUES)[: 2 * _MOST_JOINED_VALUES]
    values: list[str] = []
    index = 0
    while index < len(parts) and len(values) < _MOST_JOINED_VALUES:
        part = parts[index].strip()
        if part.lower() in _WEEKDAYS and index + 1 < len(parts):  # a weekday: the date goes on after it
            values.append(f"{part}, {parts[index + 1].strip()}")
            index += 2
        else:
            values.append(part)
            index += 1
    return values


def header(headers: Mapping[str, str], name: str) -> str:
    """A header's value by case-insensitive name ("" when absent)."""
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def joined_header(headers: Mapping[str, str], name: str) -> str:
    """Every value of a header sent more than once, joined by ", " as HTTP reads a repeated header (urllib3's
    ``items()`` gives each on its own, so ``header`` sees the first only)."""
    return ", ".join(value for key, value in headers.items() if key.lower() == name)


def check_http(page: FetchedPage, now_ms: int) -> None:
    """Raise the Outcome the HTTP status (and Retry-After) implies; return for a usable 2xx/3xx answer."""
    status = page.status
    if header(page.headers, "cf-mitigated").strip().lower() == "challenge":
        # Cloudflare's bot check (any status: 403, 503, even 200): a browser passes it by running its script, we
        # cannot, and every page of the host gets it. The header is Cloudflare's own, never a page's content.
        raise fail(
            Outcome.Banned,
            f"HTTP {status}: Cloudflare's challenge (cf-mitigated: challenge)",
            error_class="cf-challenge",
            http_status=status,
        )
    retry = joined_header(page.headers, "retry-after")
    retry_s = retry_after_seconds(retry, now_ms) if retry else 0.0
    if status == 429 or (retry and status >= 400):
        raise fail(
            Outcome.RateLimited,
            f"HTTP {status}, Retry-After {retry or '-'}",
            error_class="http-429",
            http_status=status,
            retry_after_s=retry_s,
        )
    if status in BANNED_STATUSES:
        raise fail(
            Outcome.Banned,
            f"HTTP {status}: the site refuses this client",
            error_class=f"http-{status}",
            http_status=status,
        )
    if status == 404:
        raise fail(Outcome.NotFound, "HTTP 404", error_class="http-404", http_status=404)
    if status in (401, 407):
        raise fail(Outcome.LoginRequired, f"HTTP {status}", error_class=f"http-{status}", http_status=status)
    if status >= 400 or status < 100:
        raise fail(Outcome.HttpError, f"HTTP {status}", error_class=f"http-{status}", http_status=status)


#: Final-URL fragments that mean we were bounced to a login or visitor wall. ``weibo.com/newlogin`` is the login page of
#: today's weibo.com (since 2021; ``login.php`` was the v6 one): where it sends a browser without a session, and what
#: 2024–2026 login helpers check a page's address against to know the login is missing.
_LOGIN_URL_RE = re.compile(
    r"passport\.weibo\.(?:com|cn)|login\.sina\.com\.cn|weibo\.com/(?:login\.php|newlogin\b)|/sso/signin|ajaxlogin\.php"
    r"|visit\.sina\.cn|/visitor/visitor\b|(?:passport|plogin)(?:\.m)?\.jd\.com|[?&/]user\.php\?act=login|user\.php$",
    re.IGNORECASE,
)


#: Where a site sends a request it will not answer, other than its login pages, by address (checked first, so a
#: login wall's pattern cannot claim them). Weibo's account check on ``security.weibo.com`` (a captcha or phone check
#: a person must pass with that account: the account rests, as for a login wall); its ``sorry`` pages, the address
#: saying which: an account that is gone (``usernotexists``: closed, or banned by Weibo; the target is gone, not our
#: session), an account Weibo has blocked (``userblock``, ``&is_viewer`` when it is the one asking; public crawlers rest
#: that account) and the system busy (``sysbusy``: retried soon, no account or host held); and ``/unfreeze`` (also on
#: ``sass.weibo.com``), where a frozen account is sent to be unlocked. weibo.com's v6 AJAX answers name the same pages
#: in their ``data`` where a page load would be redirected. Any other ``sorry`` page (``pagenotfound`` among them:
#: scrapers retry a redirect there, so it says nothing sure about the target) is the site's error page: Busy.
_LANDINGS: tuple[tuple[re.Pattern[str], Outcome, str], ...] = (
    (re.compile(r"//security\.weibo\.c(?:om|n)/", re.IGNORECASE), Outcome.AccountFrozen, "account-verify"),
    (re.compile(r"weibo\.c(?:om|n)/sorry\?[^#\s]*usernotexists", re.IGNORECASE), Outcome.NotFound, "user-not-exists"),
    (re.compile(r"weibo\.c(?:om|n)/sorry\?[^#\s]*userblock", re.IGNORECASE), Outcome.AccountFrozen, "account-blocked"),
    (re.compile(r"weibo\.c(?:om|n)/sorry\?[^#\s]*sysbusy", re.IGNORECASE), Outcome.Busy, "sysbusy"),
    (re.compile(r"weibo\.c(?:om|n)/unfreeze\b", re.IGNORECASE), Outcome.AccountFrozen, "account-unfreeze"),
    # Never a login, so the account is not rested for it (its HTML in place of the JSON read as a login page before).
    (re.compile(r"weibo\.c(?:om|n)/sorry\b", re.IGNORECASE), Outcome.Busy, "sorry-page"),
)


def landing_error(url: str, http_status: int) -> FetchError | None:
    """The error for a request sent to one of the ``_LANDINGS`` (a redirect's target, or a url an answer names),
    else None."""
    for pattern, outcome, error_class in _LANDINGS:
        if pattern.search(url):
            return fail(
                outcome, f"sent to {url[:200]} ({error_class})", error_class=error_class, http_status=http_status
            )
    return None


def redirect_target(page: FetchedPage) -> str:
    """Where the response sent us: ``Location`` of an unfollowed 3xx, else the final URL ("" if none)."""
    if 300 <= page.status < 400:
        return header(page.headers, "location") or page.final_url or ""
    return page.final_url or ""


def split_url(url: str) -> SplitResult | None:
    """``url`` split into its parts; None for one that does not split (a host ``urllib.parse`` refuses, such as an
    unclosed ``[`` or ``[zz]``: ValueError). Addresses come from the site, and a bad one is no bug of ours."""
    try:
        return urlsplit(url.strip())
    except ValueError:
        return None


def check_final_url(page: FetchedPage, request_url: str = "") -> None:
    """A redirect to a passport/visitor/login URL is a login wall, and one to a ``_LANDINGS`` page what that page
    means, whatever the body says (the final URL of a followed redirect, or the ``Location`` of one the runtime did
    not follow)."""
    final = redirect_target(page)
    if not final or final == request_url:
        return
    sent = sent_to_error(final, page.status)
    if sent is not None:
        raise sent


def sent_to_error(url: str, http_status: int) -> FetchError | None:
    """What being sent to ``url`` means (a ``_LANDINGS`` page, else a passport/visitor/login page), else None: for a
    redirect's target, and for a page an answer tells its own script to go to (weibo.com's v6 ``data``)."""
    landed = landing_error(url, http_status)
    if landed is not None:
        return landed
    match = _LOGIN_URL_RE.search(url)
    if match is None:
        return None
    kind = "visitor" if "visitor" in url or "visit.sina" in url else "login-redirect"
    return fail(
        Outcome.LoginRequired, f"redirected to {url[:200]} ({match[0]})", error_class=kind, http_status=http_status
    )


#: How the Chinese sites word a rate limit ("you visit / act / ask / search too often"): Weibo's pages and messages,
#: JD's answers; the bare 过于频繁 last, for the wordings not named.
TOO_FREQUENT_MARKERS: tuple[Marker, ...] = (
    Marker("访问过于频繁", Outcome.RateLimited, "too-frequent"),
    Marker("操作过于频繁", Outcome.RateLimited, "too-frequent"),
    Marker("请求过于频繁", Outcome.RateLimited, "too-frequent"),
    Marker("过于频繁", Outcome.RateLimited, "too-frequent"),
)

#: Weibo's interstitials, most specific first (the frozen page shares the busy page's skeleton).
WEIBO_MARKERS: tuple[Marker, ...] = (
    Marker("帐号存在异常", Outcome.AccountFrozen, "account-frozen"),
    Marker("账号存在异常", Outcome.AccountFrozen, "account-frozen"),
    Marker("help.weibo.com/appeal", Outcome.AccountFrozen, "account-frozen"),
    *TOO_FREQUENT_MARKERS,
    Marker("网络繁忙", Outcome.Busy, "busy"),
    Marker("系统繁忙", Outcome.Busy, "busy"),
    Marker("bpType']='sorry'", Outcome.Busy, "busy"),
    Marker("B_weibo404", Outcome.Busy, "busy"),
    Marker("访问受限", Outcome.Banned, "access-denied"),
    Marker("passport.weibo.com/visitor", Outcome.LoginRequired, "visitor"),
    Marker("Sina Visitor System", Outcome.LoginRequired, "visitor"),
    Marker("<title>新浪通行证</title>", Outcome.LoginRequired, "passport"),
    Marker("ajaxlogin.php", Outcome.LoginRequired, "passport"),
    Marker("passport.weibo.c", Outcome.LoginRequired, "passport"),
    Marker("login.sina.com.cn", Outcome.LoginRequired, "passport"),
    Marker("visit.sina.cn", Outcome.LoginRequired, "visitor"),
    Marker("请先登录", Outcome.LoginRequired, "login"),
    Marker("请输入验证码", Outcome.LoginRequired, "captcha"),
)

#: ECSHOP's login form (user.php, shown when a shop requires members to log in), a closed shop (the notice ECSHOP's
#: ``init.php`` prints in place of every page when the owner sets ``shop_closed``: its ``shop_closed`` line in the
#: zh_cn, zh_tw or en_us pack, then the owner's ``close_comment``; and 网站暂时关闭, a wording of other PHP shops), the
#: report its database layer prints (HTTP 200) in place of any page when MySQL fails it (a failed query, a failed
#: connect), and the web firewalls that front such shops, answering in place of the page (often with HTTP 200): the
#: interception notice of 宝塔's btwaf, 安全狗 and the ngx_lua_waf family (by its sentences, or by the family's page
#: title where a configuration kept only that), 云锁's script check (it sets a cookie from
#: the screen size, then reloads with ``security_verify_data``), and Cloudflare's challenge page (``_cf_chl_opt``,
#: when its ``cf-mitigated`` header, ``check_http``, did not come through). The firewalls refuse this client, not the
#: page: Banned, so the host is held off rather than every task of the shop retried at once.
ECSHOP_MARKERS: tuple[Marker, ...] = (
    Marker('name="formLogin"', Outcome.LoginRequired, "login-form"),
    Marker("act_login", Outcome.LoginRequired, "login-form"),
    Marker("本店盘点中", Outcome.Busy, "shop-closed"),
    Marker("本店盤點中", Outcome.Busy, "shop-closed"),
    Marker("Our shop on stock counting", Outcome.Busy, "shop-closed"),
    Marker("网站暂时关闭", Outcome.Busy, "shop-closed"),
    Marker("MySQL server error report", Outcome.Busy, "shop-db-error"),
    Marker("Can't Connect MySQL Server", Outcome.Busy, "shop-db-error"),
    Marker("您的请求带有不合法参数", Outcome.Banned, "waf-block"),
    Marker("已被网站管理员设置拦截", Outcome.Banned, "waf-block"),
    Marker("请登录安全狗", Outcome.Banned, "waf-block"),
    Marker("<title>网站防火墙</title>", Outcome.Banned, "waf-block"),
    Marker("security_verify_data", Outcome.Banned, "waf-challenge"),
    Marker("_cf_chl_opt", Outcome.Banned, "cf-challenge"),
)

_MARKER_CACHE: dict[tuple[Marker, ...], tuple[tuple[bytes, Marker], ...]] = {}


def scan_markers(body: bytes, markers: Iterable[Marker], limit: int = 1 << 20) -> Marker | None:
    """The first marker (in list order) found in the first ``limit`` bytes of ``body``, else None."""
    key = tuple(markers)
    compiled = _MARKER_CACHE.get(key)
    if compiled is None:
        compiled = tuple((variant, marker) for marker in key for variant in marker.variants())
        _MARKER_CACHE[key] = compiled
    head = body[:limit]
    for variant, marker in compiled:
        if variant in head:
            return marker
    return None


def unparsable(body: bytes, markers: Iterable[Marker], http_status: int, message: str) -> FetchError:
    """The error for a body without the expected structure: a marker's class if one is present (a ban or
    login page served in place of the data), else a plain ``ParseError`` saying what the body is when it is
    something no parser reads (empty, cut short, compressed, UTF-16: ``describe_unreadable``)."""
    marker = scan_markers(body, markers)
    if marker is not None:
        return fail(
            marker.outcome,
            f"{message}; response shows {marker.text!r}",
            error_class=marker.error_class,
            http_status=http_status,
        )
    described = describe_unreadable(body)
    return ParseError(
        f"{message}; {described}" if described else message, error_class="unexpected-format", http_status=http_status
    )

"""Request headers the sites' own web clients send, as the sources' defaults (``sources.<name>.headers``
overrides or removes any of them, see ``crawler_client.runner``). Evidence and dates: docs/SOURCES.md."""

from __future__ import annotations

__all__ = ["DESKTOP_UA", "MOBILE_UA", "WEIBO_COM_BUILD", "XHR_JSON"]

#: A current desktop Chrome (weibo.com, JD's item pages).
DESKTOP_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)
#: A current iPhone Safari (m.weibo.cn is the mobile web app).
MOBILE_UA = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.5 Mobile/15E148 Safari/604.1"
)
#: What a single-page app's XMLHttpRequest/axios call for JSON carries.
XHR_JSON = {
    "Accept": "application/json, text/plain, */*",
    "Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8",
    "X-Requested-With": "XMLHttpRequest",
}
#: weibo.com's web client names its own build and the server build it was served with on every ``/ajax`` call
#: (public clients of 2022-2026 copy both from the browser; one of 2026 notes that risk control may look at them).
#: Both move every few weeks; a stale pair is what a browser that has not reloaded the page sends.
WEIBO_COM_BUILD = {"client-version": "v2.47.129", "server-version": "v2025.10.02.1"}

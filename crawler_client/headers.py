"""The headers each source's requests carry: the site's own web client's (``Source.default_headers``), then
``client.user_agent`` when it is set, then ``sources.<name>.headers`` from the settings.

``sources.<name>.headers`` is text, because settings are flat values: either a JSON object
(``{"Referer": "https://m.weibo.cn/", "MWeibo-Pwa": null}``, where null removes a default) or one
``Name: value`` per line (an empty value removes a default). A malformed value is a ConfigError at start-up.
Request-specific headers a source sets itself (a Referer naming the user, ``X-XSRF-TOKEN``) come on top. Every
layer replaces a header of the same name in any case (``merge_headers``): one header of each name goes out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from icecrawler import __version__
from icecrawler.errors import ConfigError

__all__ = ["FALLBACK_USER_AGENT", "merge_headers", "parse_header_setting", "source_headers"]

#: Sent by sources that name no User-Agent of their own when ``client.user_agent`` is empty.
FALLBACK_USER_AGENT = f"icecrawler/{__version__} (+https://github.com/icecrawler/icecrawler)"
_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")


def parse_header_setting(text: str, key: str = "headers") -> dict[str, str | None]:
    """``sources.<name>.headers`` as {name: value, or None to remove}; ConfigError naming ``key`` if bad."""
    body = text.strip()
    if not body:
        return {}
    parsed: dict[str, str | None] = {}
    if body.startswith("{"):
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ConfigError(f"{key}: not a JSON object: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: not a JSON object")
        for name, value in data.items():
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{key}: the value of {name!r} must be a string or null")
            parsed[name] = value or None
    else:
        for line in body.splitlines():
            if not line.strip():
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise ConfigError(f"{key}: {line[:60]!r} is not 'Name: value'")
            parsed[name.strip()] = value.strip() or None
    for name, value in parsed.items():
        if not _NAME_RE.match(name):
            raise ConfigError(f"{key}: {name[:60]!r} is not a header name")
        if value is not None and ("\n" in value or "\r" in value):
            raise ConfigError(f"{key}: the value of {name!r} spans lines")
    return parsed


def merge_headers(*layers: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """``layers`` of headers, each over the ones before: header names are case-insensitive, so a later ``accept``
    replaces an earlier ``Accept`` (in the later one's spelling) instead of going out beside it; a None value
    removes the header."""
    merged: dict[str, str] = {}
    spelling: dict[str, str] = {}  # lower-case name -> the name as merged holds it
    for layer in layers:
        for name, value in layer.items() if isinstance(layer, Mapping) else layer:
            old = spelling.pop(name.lower(), None)
            if old is not None:
                del merged[old]
            if value is not None:
                merged[name] = value
                spelling[name.lower()] = name
    return merged


def source_headers(defaults: Mapping[str, str], user_agent: str, setting: str, key: str = "headers") -> dict[str, str]:
    """The headers one source sends on every request (see the module docstring for the order)."""
    headers = merge_headers(
        defaults, {"User-Agent": user_agent} if user_agent else {}, parse_header_setting(setting, key)
    )
    if not any(name.lower() == "user-agent" for name in headers):
        headers["User-Agent"] = FALLBACK_USER_AGENT
    return headers

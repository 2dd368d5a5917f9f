"""Per-source request headers: the site's web client's defaults, client.user_agent, sources.<name>.headers
(JSON or lines, removals), and clear start-up errors for bad values."""

from __future__ import annotations

import pytest

from crawler_client.headers import FALLBACK_USER_AGENT, parse_header_setting, source_headers
from crawler_client.runner import RunnerConfig
from crawler_client.sources.weibo_mobile import WeiboMobileSource
from crawler_client.sources.weibo_web import WeiboWebSource
from icecrawler.errors import ConfigError
from icecrawler.settings import Settings


def test_defaults_then_user_agent_then_the_setting() -> None:
    defaults = {"Accept": "application/json", "User-Agent": "Browser/1", "MWeibo-Pwa": "1"}
    assert source_headers(defaults, "", "") == defaults
    assert source_headers(defaults, "crawler/2", "")["User-Agent"] == "crawler/2"
    changed = source_headers(defaults, "crawler/2", '{"user-agent": "Mine/3", "MWeibo-Pwa": null, "X-A": "b"}')
    assert changed == {"Accept": "application/json", "user-agent": "Mine/3", "X-A": "b"}  # names match any case
    lines = source_headers(defaults, "", "Referer: https://m.weibo.cn/\nMWeibo-Pwa:\n\nAccept: */*")
    assert lines == {"Accept": "*/*", "User-Agent": "Browser/1", "Referer": "https://m.weibo.cn/"}
    assert source_headers({}, "", "")["User-Agent"] == FALLBACK_USER_AGENT


@pytest.mark.parametrize("bad", ['{"A": 1}', "[1]", "{not json", "no colon here", "Bad Name: x", '{"A": "x\\ny"}'])
def test_bad_header_settings_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"sources\.jd\.headers"):
        parse_header_setting(bad, "sources.jd.headers")


def test_runner_config_builds_each_sources_headers_and_validates_options() -> None:
    settings = Settings()
    config = RunnerConfig.from_settings(settings)
    assert config.headers["weibo_mobile"]["MWeibo-Pwa"] == "1"
    assert config.headers["weibo_mobile"]["User-Agent"] == WeiboMobileSource.default_headers["User-Agent"]
    assert config.headers["weibo_web"]["X-Requested-With"] == WeiboWebSource.default_headers["X-Requested-With"]
    settings.set("client.user_agent", "ops-crawler/1")
    settings.set("sources.weibo_web.headers", "Accept-Language: en")
    config = RunnerConfig.from_settings(settings)
    assert config.headers["jd"]["User-Agent"] == "ops-crawler/1"
    assert config.headers["weibo_web"]["Accept-Language"] == "en"
    assert config.make_source("jd").endpoint == "club"  # type: ignore[attr-defined]
    settings.set("sources.jd.endpoint", "api")
    assert RunnerConfig.from_settings(settings).make_source("jd").endpoint == "api"  # type: ignore[attr-defined]
    settings.set("sources.jd.endpoint", "nope")
    with pytest.raises(ConfigError, match=r"sources\.jd\.endpoint"):
        RunnerConfig.from_settings(settings)
    settings.set("sources.jd.endpoint", "club")
    settings.set("sources.weibo_pc.headers", "garbage")
    with pytest.raises(ConfigError, match=r"sources\.weibo_pc\.headers"):
        RunnerConfig.from_settings(settings)

"""Settings layering: defaults < file < env < --set, typed coercion, unknown keys refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from icecrawler.errors import ConfigError
from icecrawler.settings import load_settings, parse_assignments
from icecrawler.settings.default_settings import DEFAULTS


def test_defaults_when_nothing_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings["client.workers"] == DEFAULTS["client.workers"]
    assert settings.source_of("client.workers") == "default"


def test_layers_override_in_priority_order(tmp_path: Path) -> None:
    config = tmp_path / "icecrawler.toml"
    config.write_text("[client]\nworkers = 7\ntimeout_s = 3\n[scheduler]\nlease_s = 30\n", encoding="utf-8")
    settings = load_settings(
        config,
        ["client.workers=9"],
        environ={"ICECRAWLER_SCHEDULER__LEASE_S": "45", "ICECRAWLER_CLIENT__TIMEOUT_S": "4.5"},
    )
    assert settings["client.workers"] == 9 and settings.source_of("client.workers") == "cmdline"
    assert settings["scheduler.lease_s"] == 45.0 and settings.source_of("scheduler.lease_s") == "env"
    assert settings["client.timeout_s"] == 4.5
    assert isinstance(settings["client.timeout_s"], float)


def test_file_values_are_coerced_to_the_default_type(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[log]\njson = "yes"\n[scheduler]\nlease_s = 30\n', encoding="utf-8")
    settings = load_settings(config, environ={})
    assert settings["log.json"] is True
    assert settings["scheduler.lease_s"] == 30.0 and isinstance(settings["scheduler.lease_s"], float)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("client.nope=1", "unknown setting"),
        ("client.workers=many", "client.workers"),
        ("client.workers", "key=value"),
        ("log.json=perhaps", "not a boolean"),
    ],
)
def test_bad_assignments_are_clear_errors(assignment: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, [assignment], environ={})


def test_missing_named_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "absent.toml", environ={})


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text("[client\nworkers=", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken\.toml"):
        load_settings(config, environ={})


def test_parse_assignments_keeps_equals_in_values() -> None:
    assert parse_assignments(["sources.jd.base_url=http://h/x?a=b"]) == {"sources.jd.base_url": "http://h/x?a=b"}


def test_with_prefix_strips_the_prefix() -> None:
    settings = load_settings(None, environ={})
    hbase = settings.with_prefix("storage.hbase")
    assert hbase["port"] == DEFAULTS["storage.hbase.port"]


def test_a_misspelt_environment_setting_is_refused_like_a_misspelt_file_key() -> None:
    with pytest.raises(ConfigError, match=r"ICECRAWLER_CLIENT__WROKERS: unknown setting 'client.wrokers'"):
        load_settings(None, environ={"ICECRAWLER_CLIENT__WROKERS": "8"})
    # Variables that are not shaped like a setting are other tools' (ICECRAWLER_SOURCE_MODULES, the bootstrap's).
    settings = load_settings(None, environ={"ICECRAWLER_SETUP": "dev", "ICECRAWLER_SOURCES__JD__ENDPOINT": "api"})
    assert settings["sources.jd.endpoint"] == "api" and settings.source_of("sources.jd.endpoint") == "env"


def test_a_setting_of_a_source_this_process_does_not_know_says_why() -> None:
    """``[sources.bookrev]`` in a file read by a process started without the module that declares ``bookrev``:
    the error names ICECRAWLER_SOURCE_MODULES; an unknown key of a known source stays a plain typo."""
    with pytest.raises(ConfigError, match=r"setting 'sources\.bookrev\.base_url': .*ICECRAWLER_SOURCE_MODULES"):
        load_settings(None, environ={}, assignments=["sources.bookrev.base_url=http://127.0.0.1:1"])
    with pytest.raises(ConfigError, match=r"ICECRAWLER_SOURCES__BOOKREV__BASE_URL: .*ICECRAWLER_SOURCE_MODULES"):
        load_settings(None, environ={"ICECRAWLER_SOURCES__BOOKREV__BASE_URL": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match=r"unknown setting 'sources\.jd\.nope'") as typo:
        load_settings(None, environ={}, assignments=["sources.jd.nope=1"])
    assert "ICECRAWLER_SOURCE_MODULES" not in str(typo.value)


@pytest.mark.parametrize(
    ("toml", "environ", "assignment", "expected"),
    [
        # A typo or a bad value in the file (maybe ./icecrawler.toml, read without -c): the file is named.
        ("[scheduler]\nlease = 3\n", {}, None, r"^{file}: unknown setting 'scheduler\.lease'"),
        (
            '[scheduler]\nlease_s = "abc"\n',
            {},
            None,
            r"^{file}: setting scheduler\.lease_s: expected a number, got 'abc'$",
        ),
        ("[client]\nworkers = 2.5\n", {}, None, r"^{file}: setting client\.workers: expected an integer, got 2\.5$"),
        # A boolean is no number (Python's float(True) would read it as 1 second).
        (
            "[scheduler]\nlease_s = true\n",
            {},
            None,
            r"^{file}: setting scheduler\.lease_s: expected a number, got True$",
        ),
        ("[scheduler]\nlease_s = -1\n", {}, None, r"^setting scheduler\.lease_s=-1\.0: must be > 0 \(from {file}\)$"),
        # The same mistakes in the environment name the variable, on the command line the --set.
        ("", {"ICECRAWLER_SCHEDULER__LEASE_S": "abc"}, None, r"^environment variable ICECRAWLER_SCHEDULER__LEASE_S: "),
        ("", {"ICECRAWLER_SCHEDULER__LEASE_S": "0"}, None, r"must be > 0 \(from environment variable ICECRAWLER_SCH"),
        ("", {}, "client.workers=2.5", r"^setting client\.workers: expected an integer, got '2\.5'$"),
        ("", {}, "scheduler.lease_s=0", r"^setting scheduler\.lease_s=0\.0: must be > 0 \(from --set\)$"),
    ],
)
def test_a_bad_setting_says_where_it_came_from(
    tmp_path: Path, toml: str, environ: dict[str, str], assignment: str | None, expected: str
) -> None:
    """An operator with a config file, environment variables and --set needs to know which one to fix."""
    config = tmp_path / "icecrawler.toml"
    config.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, [assignment] if assignment else [], environ=environ)
    assert re.search(expected.replace("{file}", re.escape(str(config))), str(refused.value)), str(refused.value)


#: Numeric settings without a range in ``RULES``, and why: checked where they are used, or any value will do.
UNBOUNDED = {
    **{
        f"metrics.{role}.{key}": "checked by icecrawler.metrics when a daemon serves /metrics (port 0 turns it off)"
        for role in ("scheduler", "storage", "client")
        for key in ("port", "port_span")
    },
    "sandbox.seed": "any integer seeds the sandbox's world",
}


def test_every_numeric_setting_has_a_range_or_says_why_not() -> None:
    """A number a setting takes is range-checked by ``load_settings`` (CONTRIBUTING.md, "Adding a setting", step 2):
    a new one without a rule would be read as given, negative or zero, far from where it went wrong. A rule for a
    key that does not exist (a typo) would never apply."""
    from icecrawler.settings.validation import RULES

    numeric = {
        key for key, value in DEFAULTS.items() if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    assert sorted(numeric - set(RULES) - set(UNBOUNDED)) == []
    assert sorted(set(RULES) - set(DEFAULTS)) == [] and set(UNBOUNDED) <= numeric


@pytest.mark.parametrize(
    ("assignment", "bound"),
    [("scheduler.visitor_renew_s=-1", ">= 0"), ("sandbox.visitor_ttl_s=-5", "> 0"), ("sandbox.visitor_ttl_s=0", "> 0")],
)
def test_a_bad_visitor_time_is_refused_where_the_settings_are_read(assignment: str, bound: str) -> None:
    """A visitor session of no lifetime is minted expired (every weibo.com call of the crawl gets 432)."""
    key = re.escape(assignment.split("=")[0])
    with pytest.raises(ConfigError, match=rf"{key}.*must be {bound} \(from --set\)"):
        load_settings(None, [assignment], environ={})


@pytest.mark.parametrize(
    ("toml", "kind"),
    [
        ('[security]\nrevoked = ["01AB", "client-7"]\n', "an array"),  # read as "['01ab'", "'client-7']": none refused
        ('[scheduler]\naccount_sources = ["weibo_pc"]\n', "an array"),
        ("[client]\nproxy_url = true\n", "a boolean"),
        ("[sandbox]\nscenario = 2026-12-07\n", "a date or time"),
    ],
)
def test_a_text_setting_given_another_toml_type_is_refused_naming_the_file_and_key(
    tmp_path: Path, toml: str, kind: str
) -> None:
    """A TOML array for a comma-separated setting was taken as its Python repr: ``security.revoked = ["01AB"]``
    revoked no certificate, without a word. The error names the file and key, never the value (a text setting may
    be a password)."""
    config = tmp_path / "icecrawler.toml"
    config.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})
    message = str(refused.value)
    key = re.search(r"^\[(\w+)\]\n(\w+)", toml)
    assert key is not None
    assert message.startswith(f"{config}: setting {key[1]}.{key[2]}: expected text, got {kind}"), message
    assert "01AB" not in message and "weibo_pc" not in message


def test_text_settings_still_take_text_and_numbers(tmp_path: Path) -> None:
    config = tmp_path / "icecrawler.toml"
    config.write_text('[security]\nrevoked = "01AB,client-7"\n[storage.hbase]\ntable_prefix = 2026\n', encoding="utf-8")
    settings = load_settings(config, environ={})
    assert settings["security.revoked"] == "01AB,client-7"
    assert settings["storage.hbase.table_prefix"] == "2026"


@pytest.mark.parametrize(
    ("zeros", "message"),
    [
        (400, "setting client.timeout_s: expected a number, got 1000"),  # past a float's range
        (5000, "invalid TOML: Exceeds the limit"),  # past Python's digits limit for reading an int
    ],
)
def test_a_whole_number_too_large_for_a_float_setting_is_a_clear_error(
    tmp_path: Path, zeros: int, message: str
) -> None:
    """TOML integers have no size limit in Python's reader: one past a float's range was an OverflowError traceback
    from every command, and one past 4300 digits a ValueError traceback, naming neither the key nor the file."""
    config = tmp_path / "icecrawler.toml"
    config.write_text("[client]\ntimeout_s = 1" + "0" * zeros + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})
    assert str(refused.value).startswith(f"{config}: {message}"), str(refused.value)[:200]


@pytest.mark.parametrize(
    ("toml", "key", "problem"),
    [
        # Was a ValueError traceback from the scheduler's start (and from the client's first crawl of the source).
        (
            '[sources.weibo_web]\nvisitor_url = "https://[passport.weibo.com/visitor"\n',
            "sources.weibo_web.visitor_url",
            r"is not a URL \(Invalid IPv6 URL\)",
        ),
        ('[sources.jd]\nbase_url = "https://item.jd.com:80x"\n', "sources.jd.base_url", "is not a URL"),
        # Was accepted: the scheduler took "" as the host, and every crawl of the source failed as InvalidURL.
        ('[sources.jd]\nbase_url = "item.jd.com"\n', "sources.jd.base_url", "must be an http:// or https:// URL"),
        ('[client]\nproxy_url = "socks5://user:pw@127.0.0.1:1080"\n', "client.proxy_url", "must be an http://"),
    ],
)
def test_a_url_setting_that_is_no_http_url_is_refused_naming_the_key_and_file(
    tmp_path: Path, toml: str, key: str, problem: str
) -> None:
    config = tmp_path / "icecrawler.toml"
    config.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})
    message = str(refused.value)
    assert re.match(rf"setting {re.escape(key)}='.*': {problem}.* \(from {re.escape(str(config))}\)$", message), message
    assert "pw" not in message


@pytest.mark.parametrize(
    "proxy",
    [
        "http://user:Pw9/Qk7@proxy:3128",  # the URL parser reads "user:Pw9" as the host and "Pw9" as its port
        "http://user:Pw9#Qk7@proxy:3128",
        "http://user:Pw9?Qk7@proxy:3128",
        "http://us@er:Pw9/Qk7@proxy:3128",
        "user:Pw9Qk7@proxy:3128",  # no scheme: nothing after // to hide
    ],
)
def test_a_refused_proxy_url_never_shows_its_password(tmp_path: Path, proxy: str) -> None:
    """A password with an unescaped ``/``, ``#`` or ``?`` ended the part that was hidden before it, so the error
    showed the whole URL, and the parser's own words (``Port could not be cast to integer value as 'Pw9'``) part
    of the password. Everything before the last ``@`` is hidden, and the parser's words are left out."""
    config = tmp_path / "icecrawler.toml"
    config.write_text(f'[client]\nproxy_url = "{proxy}"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, environ={})
    message = str(refused.value)
    assert message.startswith("setting client.proxy_url='") and "…@proxy:3128'" in message, message
    assert "Pw9" not in message and "Qk7" not in message, message


def test_url_settings_take_http_urls_and_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./icecrawler.toml
    settings = load_settings(
        None,
        [
            "client.proxy_url=http://user:pw@127.0.0.1:3128",
            "sources.weibo_web.visitor_url=",
            "sources.jd.base_url=https://[::1]:8443/jd",
        ],
        environ={},
    )
    assert settings["sources.jd.base_url"] == "https://[::1]:8443/jd"

"""A source added in one place: this module declares a throwaway source (``toyshop``, JSON review pages) and its
sandbox site, and nothing else in the tree knows about it. Named in ``ICECRAWLER_SOURCE_MODULES``, it is found
by every process of a real local crawl (sandbox, scheduler with Berkeley DB, storage with SQLite, an
``icecrawler client``): ``icecrawler seed toyshop:7`` takes it, the client crawls its pages, storage keeps its
reviews, and everything the sandbox published is stored exactly once. This is the walk-through of
CONTRIBUTING.md ("Adding a source") as a test."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from crawler_client.sources._cursor import ReviewOrder
from crawler_client.sources._dates import iso_of_ms
from crawler_client.sources._decode import decode_body, load_json
from crawler_client.sources._detect import check_http
from crawler_client.sources.base import FetchedPage, Item, PageRequest, ParsedPage, SavedPages, SourceSpec
from icecrawler.errors import ConfigError, FetchError, ParseError
from icecrawler.models import SOURCES, Outcome, Review, Task, TaskKind
from icecrawler.sourcespec import ENV_MODULES, group_by_kind, registry
from sandbox.sites import SiteContext
from sandbox.web import OpenSite, SimRequest, SimResponse, page_count, page_slice

# --- the source: everything the system needs to know about the site, in one place -----------------------------

SPEC = SourceSpec(
    name="toyshop",
    kinds=frozenset({TaskKind.ProductReviews}),
    default_kind=TaskKind.ProductReviews,
    table="review",
    identity="(toyshop, product id, review id)",
    base_url="http://127.0.0.1:8800/toy",
    sandbox_site="toy",
)
PER_PAGE = 5


class ToyShopSource(ReviewOrder, SavedPages):
    """``reviews:toyshop:{id}``: ``/reviews/{id}.json?page=N`` answers ``{"page", "pages", "reviews": [...]}``."""

    spec: ClassVar[SourceSpec] = SPEC
    default_headers: ClassVar[dict[str, str]] = {"Accept": "application/json"}
    sniffers: ClassVar[tuple[re.Pattern[bytes], ...]] = (re.compile(rb'"product"\s*:\s*"(\w{1,64})"'),)

    def first_request(self, task: Task, base_url: str) -> PageRequest:
        return PageRequest(url=f"{base_url.rstrip('/')}/reviews/{task.target}.json", params={"page": "1"})

    def parse(self, task: Task, request: PageRequest, page: FetchedPage, now_ms: int) -> ParsedPage:
        # The shared checks first: a 404 is NotFound, 418/403 Banned, 429 RateLimited (check_http), bad JSON a
        # ParseError carrying the status (load_json). Then every read of the answer's shape sits inside one
        # try, so a missing key, a wrong type or an absurd number is a ParseError too, never a crash.
        check_http(page, now_ms)
        doc = load_json(decode_body(page.body), what="toyshop review page", http_status=page.status)
        try:
            number, pages = int(doc["page"]), int(doc["pages"])
            items: list[Item] = [
                Review(
                    id=str(row["id"]),
                    product_id=task.target,
                    source=self.name,
                    user=str(row["user"]),
                    content=str(row["text"]),
                    score=int(row["score"]),
                    created_at=iso_of_ms(int(row["ms"])),
                    fetched_at=iso_of_ms(now_ms),
                )
                for row in doc["reviews"]
            ]
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise ParseError(f"toyshop: not a review page ({exc!r})", http_status=page.status) from exc
        following = None
        if number < pages:
            following = PageRequest(url=request.url, params={"page": str(number + 1)}, page=request.page + 1)
        return ParsedPage(items=items, next_request=following, total_pages=pages)


#: What the source registry reads from this module.
SOURCE = ToyShopSource


# --- its sandbox site: the world's reviews of "toyshop" products, rendered as the source expects -------------


class ToyShopSite(OpenSite):
    """No login (``OpenSite``); ``target_of`` lets misbehaviour rules pick a product."""

    prefix: ClassVar[str] = "toy"
    _PATH = re.compile(r"^/reviews/(\w{1,64})\.json$")

    def __init__(self, world: Any) -> None:
        self.world = world

    def target_of(self, request: SimRequest) -> str:
        match = self._PATH.match(request.path)
        return match[1] if match else ""

    def handle(self, request: SimRequest) -> SimResponse:
        product = self.target_of(request)
        reviews = self.world.reviews(SPEC.name, product, request.now_ms) if product else None
        if reviews is None:
            return SimResponse.not_found()
        number = request.int_param("page", 1)
        rows = [
            {
                "id": review.review_id,
                "user": review.user,
                "text": review.text,
                "score": review.score,
                "ms": review.created_ms,
            }
            for review in page_slice(reviews, number, PER_PAGE)
        ]
        return SimResponse.json(
            {"product": product, "page": number, "pages": page_count(len(reviews), PER_PAGE), "reviews": rows}
        )


def make_sandbox_site(context: SiteContext) -> ToyShopSite:
    """What the sandbox looks up by name for this source's ``sandbox_site``."""
    return ToyShopSite(context.world)


# --- the test ----------------------------------------------------------------------------------------------


@pytest.fixture
def toyshop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This module as a source here and in every child process (found by module name on the path)."""
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv(ENV_MODULES, __name__)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    registry.register(sys.modules[__name__])
    try:
        yield
    finally:
        registry.forget(SPEC.name)


@pytest.mark.usefixtures("toyshop")
def test_the_registry_knows_everything_the_source_declares() -> None:
    from crawler_client.runner import form_logins
    from icecrawler.settings import load_settings
    from sandbox.misbehave import MisbehaviourRule
    from sandbox.sources import source_settings, visitor_sources

    assert SOURCES["toyshop"] == frozenset({TaskKind.ProductReviews})
    assert group_by_kind(["toyshop:1"], None) == {TaskKind.ProductReviews: ["toyshop:1"]}
    settings = load_settings(environ={}, assignments=["sources.toyshop.base_url=http://127.0.0.1:1/toy"])
    assert settings.with_prefix("sources.toyshop") == {"base_url": "http://127.0.0.1:1/toy", "headers": ""}
    assert "toyshop" not in form_logins()
    assert source_settings("http://127.0.0.1:9")["sources.toyshop.base_url"] == "http://127.0.0.1:9/toy"
    assert "toyshop" not in visitor_sources() and "weibo_web" in visitor_sources()  # by login and visitor_url
    assert MisbehaviourRule("toy").site == "toy"  # its sandbox site takes misbehaviour rules like the others


@pytest.mark.usefixtures("toyshop")
def test_icecrawler_sources_lists_a_new_source(capsys: pytest.CaptureFixture[str]) -> None:
    from icecrawler_cli.cli import main

    assert main(["sources", "--json", "--set", "sources.toyshop.base_url=http://127.0.0.1:1/toy"]) == 0
    rows = {row["source"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) >= {"ecshop", "jd", "weibo_mobile", "weibo_pc", "weibo_web", "toyshop"}
    assert rows["toyshop"] == {
        "source": "toyshop",
        "kinds": ["reviews"],
        "table": "review",
        "login": "none",
        "base_url": "http://127.0.0.1:1/toy",
        "sandbox_site": "toy",
        "module": __name__,
    }
    assert rows["ecshop"]["kinds"] == ["reviews", "listing"] and rows["ecshop"]["login"] == "form"
    assert main(["sources"]) == 0
    assert "toyshop" in capsys.readouterr().out


def test_an_unknown_source_says_where_sources_outside_the_tree_come_from() -> None:
    """A process started without the module of a source another process knows says what it lacks."""
    from icecrawler.errors import InvalidArgumentError
    from icecrawler.models import make_task_id

    with pytest.raises(ConfigError, match=f"unknown source 'nowhere' .*{ENV_MODULES} names its module"):
        registry.spec("nowhere")
    with pytest.raises(ConfigError, match=f"unknown source 'nowhere' .*{ENV_MODULES}"):
        group_by_kind(["nowhere:1"], None)
    with pytest.raises(InvalidArgumentError, match=f"unknown source 'nowhere' .*{ENV_MODULES}"):
        make_task_id(TaskKind.ProductReviews, "nowhere", "1")


def test_a_source_module_in_the_tree_without_its_source_line_is_told_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A module of the source package that forgets ``SOURCE = ...`` (step 3) is passed over like the ``base``
    helper; asking for its source blamed ``ICECRAWLER_SOURCE_MODULES``, which an in-tree source never needs."""
    import icecrawler.sourcespec as sourcespec

    package = tmp_path / "halfdone_sources"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tmallish.py").write_text("class TmallishSource:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sourcespec, "SOURCE_PACKAGE", "halfdone_sources")
    monkeypatch.delenv(ENV_MODULES, raising=False)
    fresh = sourcespec.Registry()
    with pytest.raises(ConfigError) as info:
        fresh.spec("tmallish")
    assert "halfdone_sources.tmallish defines no SOURCE: end the module with `SOURCE = " in str(info.value)
    assert ENV_MODULES not in str(info.value)
    with pytest.raises(ConfigError, match=f"unknown source 'elsewhere' .*{ENV_MODULES}"):
        fresh.spec("elsewhere")  # a name no module of the package has: declared outside, perhaps


def test_the_source_packages_helper_module_is_not_taken_for_a_source_missing_its_line() -> None:
    """``base`` holds the shared mechanism and declares no source by design: asking for a source named "base" told
    the user to end that module with ``SOURCE = ...``."""
    with pytest.raises(ConfigError) as info:
        registry.spec("base")
    assert "defines no SOURCE" not in str(info.value) and "unknown source 'base'" in str(info.value)


def test_a_source_module_named_by_its_file_is_told_how_to_name_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``ICECRAWLER_SOURCE_MODULES`` takes module names on the Python path: a file path, or a module whose folder
    is not on the path, is told so; a module that is found but fails on an import of its own is not."""
    from icecrawler.sourcespec import Registry

    for value in ("/tmp/newsrc/mysource.py", "mysource_not_on_the_path"):
        monkeypatch.setenv(ENV_MODULES, value)
        with pytest.raises(ConfigError, match=r"names modules on the Python path, not files: .* PYTHONPATH"):
            len(Registry())
    (tmp_path / "broken_source_module.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV_MODULES, "broken_source_module")
    with pytest.raises(ConfigError, match="no_such_dependency_here") as info:
        len(Registry())
    assert "PYTHONPATH" not in str(info.value)


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, b'{"page": 1, "pages": 1, "reviews": [{"id": 1}]}', Outcome.ParseError),  # a row missing fields
        (200, b'{"page": Infinity, "pages": 1, "reviews": []}', Outcome.ParseError),
        (200, b'{"page": 1, "pages": 1, "reviews": 7}', Outcome.ParseError),
        (200, b"<html>busy</html>", Outcome.ParseError),
        (404, b"", Outcome.NotFound),
        (418, b"", Outcome.Banned),
        (429, b"", Outcome.RateLimited),
    ],
)
def test_the_walk_through_source_refuses_what_the_contract_says(status: int, body: bytes, outcome: Outcome) -> None:
    """The source a newcomer copies keeps the parser contract: a refusal is a classified FetchError, garbage a
    ParseError, and nothing else escapes."""
    source = ToyShopSource()
    task = Task(id="reviews:toyshop:7", kind=TaskKind.ProductReviews, source="toyshop", target="7", params={})
    request = source.first_request(task, "http://127.0.0.1:9/toy")
    page = FetchedPage(url=request.url, status=status, headers={}, body=body)
    with pytest.raises(FetchError) as info:
        source.parse(task, request, page, 1_700_000_000_000)
    assert info.value.outcome == outcome


@pytest.mark.e2e
@pytest.mark.ice
@pytest.mark.bdb
@pytest.mark.slow
@pytest.mark.usefixtures("toyshop")
def test_a_source_declared_in_one_module_is_crawled_end_to_end(tmp_path: Path) -> None:
    from icecrawler_local.stack import running_stack
    from sandbox.scenario import Product, Scenario
    from sandbox.schedules import Schedule
    from tests.helpers import caught_up, wait_for

    scenario = Scenario(
        seed=3,
        products=(
            Product("toyshop", "7", backlog=23, schedule=Schedule("periodic", interval_s=300)),
            Product("toyshop", "8", backlog=4, schedule=Schedule("static")),
        ),
    )
    client_settings = {"client.workers": 1, "client.idle_sleep_s": 0.2, "client.max_pages": 20}
    scheduler_settings = {"scheduler.initial_period_s": 60, "scheduler.min_period_s": 30}
    with running_stack(
        tmp_path, scenario, speed=60.0, scheduler_settings=scheduler_settings, client_settings=client_settings
    ) as stack:
        stack.seed(["toyshop:7", "toyshop:8"])
        stack.start_client("client")
        wait_for(lambda: len(stack.stored()) >= 27, "the toyshop backlog was never stored", timeout_s=60)
        # The backlog is published at the start: judge once it is older than the catch-up window.
        time.sleep(max(0.0, stack.origin + 10.0 - time.time()))
        expected, stored, everything = caught_up(stack, catch_up_s=8.0, timeout_s=60)
        published = {key for key in expected if key[0] == "toyshop"}
    assert len(published) >= 27  # both backlogs, and what product 7 published meanwhile
    assert not published - set(stored), f"published but not stored: {sorted(published - set(stored))[:5]}"
    assert all(count == 1 for count in stored.values()), "a review was stored twice"
    assert set(stored) <= set(everything), "storage holds a review the sandbox never published"


@pytest.mark.usefixtures("toyshop")
def test_icecrawler_settings_lists_every_source_s_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """Source settings have one home, the spec: ``icecrawler settings`` lists every registered source's (a new
    one's too), with its origin, although no defaults file names them."""
    from icecrawler.settings import load_settings
    from icecrawler.settings.default_settings import DEFAULTS
    from icecrawler_cli.commands.settings import Command

    assert not [key for key in DEFAULTS if key.startswith("sources.")]
    settings = load_settings(environ={}, assignments=["sources.jd.endpoint=api"])
    assert Command().run(argparse.Namespace(json=True), settings, []) == 0
    listed = json.loads(capsys.readouterr().out)
    declared = {key: value for name in registry for key, value in registry.spec(name).settings().items()}
    assert set(declared) <= set(listed) and "sources.toyshop.base_url" in listed
    assert listed["sources.jd.endpoint"] == "api" and settings.source_of("sources.jd.endpoint") == "cmdline"
    assert listed["sources.weibo_web.visitor_url"].endswith("/passport/visitor/genvisitor2")
    assert settings.source_of("sources.toyshop.headers") == "default"


def test_a_bad_declaration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from icecrawler.errors import ConfigError
    from icecrawler.sourcespec import Registry

    with pytest.raises(ConfigError, match="default kind"):
        SourceSpec("x", frozenset({TaskKind.WeiboUser}), TaskKind.ProductReviews, "weibo", "id", "http://h")
    with pytest.raises(ConfigError, match="table must be one of"):
        SourceSpec("x", frozenset({TaskKind.WeiboUser}), TaskKind.WeiboUser, "posts", "id", "http://h")
    with pytest.raises(ConfigError, match="login must be one of"):
        SourceSpec("x", frozenset({TaskKind.WeiboUser}), TaskKind.WeiboUser, "weibo", "id", "http://h", login="oauth")
    monkeypatch.setenv(ENV_MODULES, "tests.client.no_such_module")
    with pytest.raises(ConfigError, match=r"cannot import 'tests\.client\.no_such_module'"):
        list(Registry())
    monkeypatch.setenv(ENV_MODULES, "tests.helpers")
    with pytest.raises(ConfigError, match="declares no source"):
        list(Registry())
    monkeypatch.setenv(ENV_MODULES, "crawler_client.sources.jd")  # already found: the same class is fine
    assert "jd" in Registry()


def test_two_sources_of_one_name_are_refused() -> None:
    import types

    from icecrawler.errors import ConfigError
    from icecrawler.sourcespec import Registry

    impostor = types.ModuleType("impostor")
    impostor.SOURCE = type("Impostor", (ToyShopSource,), {"spec": ToyShopSource.spec})  # type: ignore[attr-defined]
    fresh = Registry()
    fresh.register(sys.modules[__name__])
    with pytest.raises(ConfigError, match="declared twice"):
        fresh.register(impostor)
    assert fresh.source_class("toyshop") is ToyShopSource

"""Fixtures for the sandbox tests: a small scenario, an in-process server on a free loopback port with a
frozen clock (tests move time with ``advance``), and a crawl helper that drives the real parsers over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from crawler_client.sources import FetchedPage, Item, PageRequest, get_source
from icecrawler.models import Task, TaskKind, make_task_id
from sandbox import Category, Product, SandboxServer, Scenario, Schedule, WeiboUser
from sandbox.sources import SITE_OF_SOURCE

#: A fixed start (2026-11-30 08:00 Beijing) so every generated id and time is the same on every run.
ORIGIN_S = 1_795_996_800.0
SOURCE_PREFIX = SITE_OF_SOURCE


def small_scenario() -> Scenario:
    """Two users (one per mobile cursor form), ECSHOP products in a paged category, an empty category, JD."""
    return Scenario(
        seed=11,
        users=(
            WeiboUser(
                uid=1000000001,
                name="甲",
                cursor="since_id",
                backlog=52,
                long_text_every=4,
                retweet_every=5,
                schedule=Schedule("periodic", interval_s=600),
            ),
            WeiboUser(
                uid=1000000002,
                name="乙",
                cursor="page",
                backlog=23,
                pinned=False,
                schedule=Schedule("poisson", per_hour=6),
            ),
        ),
        products=(
            Product("ecshop", "12", category=1, backlog=12, schedule=Schedule("periodic", interval_s=600)),
            Product("ecshop", "13", category=1, backlog=0),
            Product("ecshop", "14", category=1, backlog=2, appear_after_s=3600),
            Product(
                "jd",
                "100012043978",
                backlog=23,
                count_bonus=1_000_000,
                schedule=Schedule("bursty", interval_s=1800, burst_size=3),
            ),
        ),
        categories=(
            Category(
                1,
                name="手机",
                per_page=2,
                arrivals=Schedule("periodic", interval_s=1800),
                arrival_first_id=100,
                arrival_limit=3,
            ),
            Category(2, name="空分类"),
        ),
    )


@pytest.fixture
def server() -> Iterator[SandboxServer]:
    with SandboxServer(small_scenario(), speed=0, port=0, origin=ORIGIN_S) as running:
        yield running


@dataclass
class Crawl:
    items: list[Item]
    requests: int
    last: FetchedPage


def fetch(request: PageRequest, session: requests.Session | None = None) -> FetchedPage:
    http = session or requests.Session()
    headers = dict(request.headers)
    for header, cookie in request.cookie_headers.items():  # as the client's transport does (X-XSRF-TOKEN)
        if http.cookies.get(cookie):
            headers[header] = str(http.cookies.get(cookie))
    response = http.request(
        request.method, request.url, params=request.params or None, data=request.data, headers=headers, timeout=10
    )
    return FetchedPage(
        url=response.request.url or request.url,
        status=response.status_code,
        headers=dict(response.headers),
        body=response.content,
        final_url=response.url,
    )


def crawl(
    server: SandboxServer,
    source_name: str,
    target: str,
    kind: TaskKind = TaskKind.WeiboUser,
    session: requests.Session | None = None,
    max_requests: int = 40,
) -> Crawl:
    """Follow ``next_request`` from the first page to the end, like the client (without the incremental stop)."""
    source = get_source(source_name)
    task = Task(
        id=make_task_id(kind, source_name, target),
        kind=kind,
        source=source_name,
        target=target,
        lease_deadline_ms=int(time.time() * 1000),
    )
    request: PageRequest | None = source.first_request(task, server.base_url(SOURCE_PREFIX[source_name]))
    items: list[Item] = []
    count = 0
    page = None
    while request is not None and count < max_requests:
        page = fetch(request, session)
        parsed = source.parse(task, request, page, server.clock.now_ms())
        items.extend(parsed.items)
        request = parsed.next_request
        count += 1
    assert page is not None
    return Crawl(items, count, page)


def truth_ids(server: SandboxServer, source: str, target: str) -> list[str]:
    return [item["id"] for item in server.truth(source, target)["items"]]


def visitor_session(server: SandboxServer) -> requests.Session:
    """A requests session holding a visitor SUB/SUBP minted by the sandbox's passport (the scheduler's way)."""
    from sandbox.sources import source_settings
    from scheduler_server.visitors import mint_visitor

    session = requests.Session()
    for name, value in mint_visitor(source_settings(server.url)["sources.weibo_web.visitor_url"]).items():
        session.cookies.set(name, value)
    return session

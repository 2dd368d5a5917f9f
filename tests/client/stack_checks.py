"""Checks shared by the client's end-to-end tests: what the sandbox published vs what storage holds, and
bounded polling."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from bench._client_stack import ClientStack
from icecrawler.processes import ManagedProcess

_BEIJING = timezone(timedelta(hours=8))


def _time_ms(text: str) -> int:
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_BEIJING)
    return int(moment.timestamp() * 1000)


def _norm(text: str) -> str:
    return " ".join(text.split())


def truth_keys(stack: ClientStack, published_before_wall_ms: int) -> collections.Counter[tuple[Any, ...]]:
    """Identity of each published item: (source, target, id) or, for ECSHOP (no ids), time and text."""
    keys: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for item in stack.truth()["items"]:
        if item["published_wall_ms"] > published_before_wall_ms:
            continue
        keys[_truth_key(item)] += 1
    return keys


def _truth_key(item: dict[str, Any]) -> tuple[Any, ...]:
    if item["source"] == "ecshop":
        # No ids on ECSHOP pages; the page shows "匿名用户" for an empty user name, so time + text identify it.
        return ("ecshop", item["target"], _time_ms(item["created_at"]), _norm(item["text"]))
    return (item["source"], str(item["target"]), str(item["id"]))


def stored_keys(stack: ClientStack) -> collections.Counter[tuple[Any, ...]]:
    posts, reviews = stack.stored()
    keys: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for source, user_id, post_id in posts:
        keys[(source, str(user_id), str(post_id))] += 1
    for source, product, review_id, _user, content, created_at in reviews:
        if source == "ecshop":
            keys[("ecshop", product, _time_ms(created_at), _norm(content))] += 1
        else:
            keys[(source, product, str(review_id))] += 1
    return keys


Keys = collections.Counter[tuple[Any, ...]]


def wait_until_caught_up(stack: ClientStack, catch_up_s: float, timeout_s: float) -> tuple[Keys, Keys]:
    """Poll until every item published more than ``catch_up_s`` ago is stored (bounded by ``timeout_s``);
    returns (expected, stored) for the caller's assertions."""
    deadline = time.monotonic() + timeout_s
    while True:
        expected = truth_keys(stack, int((time.time() - catch_up_s) * 1000))
        stored = stored_keys(stack)
        if not (expected - stored) or time.monotonic() > deadline:
            return expected, stored
        time.sleep(1.0)


def client_logs(clients: list[ManagedProcess]) -> str:
    return "\n".join(client.log_path.read_text(errors="replace") for client in clients)


def wait_for(condition: Callable[[], bool], failure: str, timeout_s: float = 45.0) -> None:
    """Poll ``condition`` (bounded); fail with ``failure`` if it never holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(failure)
        time.sleep(0.5)

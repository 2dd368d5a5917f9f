"""Product discovery end to end: only listing tasks are seeded (no product id at all). ECSHOP category 1 has two
sub-categories whose goods also show on its pages, so listings 1 and 2 (and 1 and 3) list the same products, and
two clients crawl them at the same time. New goods appear in the sub-categories while the crawl runs.

Checked against the sandbox's ground truth and the scheduler's records:

- every product that appeared is discovered: its reviews task exists, created by the first or second crawl of its
  own category's listing reported after the product appeared (or after the listing was seeded, for a product that
  was there before): counted in crawls, since a loaded machine stretches a crawl's wall time;
- no product is queued twice: the listings' discovered counts (the scheduler counts only the ids of a report
  that were new) add up to the number of product tasks, and the scheduler holds exactly listings + products tasks;
- two different clients did crawl overlapping listings at the same time (completion-log lease intervals), and
  still no task was ever leased twice at once;
- every review of a discovered product (published up to a short catch-up window before the end) is stored
  exactly once;
- ``icecrawler status`` shows how many products each listing discovered.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from icecrawler_local.oracle import leases_by_task, overlapping_leases, stored_index, truth_index
from icecrawler_local.stack import running_stack
from sandbox.scenario import Category, Product, Scenario
from sandbox.schedules import Schedule

pytestmark = [pytest.mark.e2e, pytest.mark.ice, pytest.mark.bdb, pytest.mark.slow]

SPEED = 60.0
INITIAL_PERIOD_S = 60.0
#: Wall seconds of crawling (50 simulated minutes: every arrival below happens by then).
CRAWL_S = 50.0
CATCH_UP_S = 8.0
LISTINGS = ["ecshop:1", "ecshop:2", "ecshop:3"]
SCHEDULER = {
    "scheduler.initial_period_s": INITIAL_PERIOD_S,
    "scheduler.min_period_s": 60,
    "scheduler.max_period_s": 600,
    "scheduler.lease_s": 15,
    "scheduler.history_len": 500,
    "scheduler.maintenance_interval_s": 0.2,
}
CLIENT = {
    "client.workers": 1,
    "client.batch": 1,
    "client.max_pages": 30,
    "client.idle_sleep_s": 0.2,
    "client.timeout_s": 5,
    "client.progress_log_s": 2,
}


def scenario() -> Scenario:
    reviews = Schedule("periodic", interval_s=400)
    return Scenario(
        seed=9,
        products=(Product("ecshop", "12", category=2, backlog=4, schedule=Schedule("periodic", interval_s=500)),),
        categories=(
            Category(1, name="手机数码", per_page=3),
            Category(
                2,
                name="手机",
                parent=1,
                per_page=3,
                arrivals=Schedule("periodic", interval_s=600),
                arrival_first_id=1000,
                arrival_limit=4,
                arrival_backlog=2,
                arrival_reviews=reviews,
            ),
            Category(
                3,
                name="耳机",
                parent=1,
                per_page=3,
                arrivals=Schedule("periodic", interval_s=900),
                arrival_first_id=2000,
                arrival_limit=3,
                arrival_backlog=1,
                arrival_reviews=reviews,
            ),
        ),
    )


def period_at(info: dict[str, Any], sim_ms: int) -> float:
    """The period a listing was running with at ``sim_ms``: the one set by its last crawl before then."""
    period = INITIAL_PERIOD_S
    for entry in info["history"]:
        if entry["time_ms"] <= sim_ms:
            period = float(entry["period_s"])
    return period


def appeared_for(listing: dict[str, Any], product: dict[str, Any]) -> int:
    """When ``product`` appeared as its listing sees it (simulated ms): one there before the listing was seeded
    counts from the seeding."""
    return max(int(product["appeared_ms"]), int(listing["created_ms"]))


def crawls_since(listing: dict[str, Any], product: dict[str, Any]) -> list[int]:
    """The times (simulated ms) of the listing's crawls reported after ``product`` appeared for it."""
    since_ms = appeared_for(listing, product)
    return [int(e["time_ms"]) for e in listing["history"] if int(e["time_ms"]) > since_ms]


def test_listings_discover_new_products_once_and_their_reviews_are_crawled(tmp_path: Path) -> None:
    with running_stack(
        tmp_path, scenario(), speed=SPEED, scheduler_settings=SCHEDULER, client_settings=CLIENT, latency_ms=150
    ) as stack:
        clients = [stack.start_client(name) for name in ("c1", "c2")]
        # Both clients are up and idle before the listings exist, so that they lease them at the same time.
        deadline = time.monotonic() + 90
        while not all("started" in c.log_path.read_text(errors="replace") for c in clients):
            assert time.monotonic() < deadline, "the clients did not start"
            assert all(c.alive() for c in clients), "a client died at start"
            time.sleep(0.3)
        print(stack.seed([], LISTINGS))
        time.sleep(CRAWL_S)
        # Every arrival has happened by now. Wait (bounded) until each product's listing was crawled twice since it
        # appeared, so that each is judged below: on a loaded machine the last arrivals' crawls come late.
        deadline = time.monotonic() + 120
        while True:
            truth = stack.truth()
            published = {key for _, key in truth_index(truth["items"], int((time.time() - CATCH_UP_S) * 1000))}
            stored = stored_index(stack.stored())
            listings = {f"listing:{x}": stack.task_info(f"listing:{x}") for x in LISTINGS}
            caught_up = all(
                len(crawls_since(listings[f"listing:ecshop:{p['category']}"], p)) >= 2 for p in truth["products"]
            )
            if (published <= set(stored) and caught_up) or time.monotonic() > deadline:
                break
            time.sleep(1)
        products = stack.truth()["products"]
        # The clients stop before the scheduler's state is read, so that no crawl lands between the readings
        # below: the stats and the status line must describe the same moment.
        for client in clients:
            client.stop(timeout_s=20)
        listing_info = {f"listing:{x}": stack.task_info(f"listing:{x}") for x in LISTINGS}
        product_info = {}
        for product in stack.truth()["products"]:
            try:
                product_info[product["product"]] = stack.task_info(f"reviews:ecshop:{product['product']}")
            except Exception:  # not discovered (yet): checked below
                pass
        stats = stack.scheduler_stats()
        status = stack.icecrawler("status")
        assert stack.stop_scheduler() == 0
        done = stack.done_log()

    print(status)
    print(
        "listing periods (min):",
        {k: [round(e["period_s"] / 60, 1) for e in v["history"]] for k, v in listing_info.items()},
    )
    for task, info in listing_info.items():  # listings recur, their period adapting like any task's
        assert info["crawls"] >= 3 and len({e["period_s"] for e in info["history"]}) > 1, f"{task}: {info}"
    assert len(products) >= 6, f"the sandbox added too few products in time: {products}"
    delays = {}
    for product in products:
        found = product_info.get(product["product"])
        assert found is not None, f"product {product['product']} (category {product['category']}) never discovered"
        listing = listing_info[f"listing:ecshop:{product['category']}"]
        since_ms = appeared_for(listing, product)
        delay = (found["created_ms"] - since_ms) / 1000
        delays[product["product"]] = (round(delay), 2 * period_at(listing, since_ms))
        # Counted in its listing's crawls, not in simulated seconds: a loaded machine stretches a crawl's wall time,
        # and at this speed two periods are two wall seconds. A crawl reported after the product appeared may have
        # read the page before it did, so the second such crawl is the last that may miss it.
        crawls_after = crawls_since(listing, product)
        assert len(crawls_after) >= 2, f"{product['category']}: its listing was not crawled twice after {since_ms}"
        assert found["created_ms"] <= crawls_after[1], (
            f"product {product['product']} discovered {delay:.0f}s after it appeared, after its listing's second "
            f"crawl since then (periods {delays[product['product']][1] / 2:.0f}s)"
        )
    print("discovery delay vs two listing periods (simulated s):", delays)

    discovered = {task: int(count) for task, count in stats["listings"].items()}
    print("discovered per listing:", discovered)
    assert sum(discovered.values()) == len(product_info), "a product was added as new by two listings"
    assert stats["tasks"] == len(LISTINGS) + len(product_info)
    for task, count in discovered.items():
        assert re.search(rf"{re.escape(task)}: {count} products discovered", status), status

    assert overlapping_leases(done) == [], "a task was leased twice at once"
    per_task = leases_by_task(done)
    concurrent = [
        (a["task_id"], a["worker"], b["task_id"], b["worker"])
        for a in per_task["listing:ecshop:1"]
        for other in ("listing:ecshop:2", "listing:ecshop:3")
        for b in per_task.get(other, [])
        if a["worker"] != b["worker"]
        and a["leased_wall_ms"] < b["ended_wall_ms"]
        and b["leased_wall_ms"] < a["ended_wall_ms"]
    ]
    print(f"{len(concurrent)} overlapping listing crawls by two clients at the same time")
    assert concurrent, "two clients never crawled overlapping listings at the same time"

    missing = published - set(stored)
    assert not missing, f"{len(missing)} review(s) never stored, e.g. {sorted(missing)[:3]}"
    assert {k: c for k, c in stored.items() if c > 1} == {}
    assert all(key[0] == "ecshop" for key in stored)

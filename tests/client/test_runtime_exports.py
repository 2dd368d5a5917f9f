"""The client runtime's modules export exactly their public names, in isort order (CONTRIBUTING.md, code layout)."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "crawler_client.http",
    "crawler_client.transport",
    "icecrawler.cookie_blob",
    "crawler_client.crawl",
    "crawler_client.sink",
    "crawler_client.writer",
    "crawler_client.wire_size",
    "crawler_client.gateways",
    "crawler_client.runner",
    "crawler_client.daemon",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_lists_the_public_names_sorted(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and getattr(value, "__module__", None) == name
    }
    assert set(exported) == public | {n for n in exported if n.isupper()}

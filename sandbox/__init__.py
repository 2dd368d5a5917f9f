"""Local stand-ins for the real sites, for the demo, the tests and the benchmarks.

One HTTP server (default ``http://127.0.0.1:8800``) serves each site under a prefix, with the real sites'
paths, parameters and formats after it (``docs/SITE_RESPONSES.md``):

- ``/pc``: weibo.com desktop, ``/p/aj/v6/mblog/mbloglist`` (45 posts per page in 3 chunks of 15).
- ``/m``: m.weibo.cn, ``/api/container/getIndex`` (``page=`` and ``since_id=`` cursors, pinned post first,
  retweets, ``isLongText`` posts) and ``/statuses/extend``.
- ``/ecshop``: an ECSHOP mall, ``goods.php``, ``comment.php?act=gotopage``, ``category.php``, ``user.php``.
- ``/jd``: ``/comment/productPageComments.action`` (JSONP or JSON).

Items arrive on per-target schedules (periodic, Poisson, bursty, static, or a real publication trace:
``sandbox.tracescenario``) against a scalable clock shared with the rest of a run (``icecrawler.clock``); every
published item goes into a ground-truth log. Misbehaviour
(login walls, 418 bursts, 429 + Retry-After, GBK busy pages, truncated bodies, slow answers, bounded hangs)
is switched per site or target, at start or at run time. Control and truth live under ``/__sandbox/``.

Layers: ``schedules`` and ``content`` are pure; ``world`` holds state and truth (``now`` passed in);
``sites/*`` render one site each; ``server`` does HTTP, misbehaviour and the request log. In-process use::

    with SandboxServer(default_scenario(), speed=3600, port=0) as server:
        server.base_url("m")            # http://127.0.0.1:<port>/m
        server.truth()                  # what was published so far

As a child process: ``sandbox.launch.sandbox_process(log_dir, speed=60)``. See docs/SANDBOX.md.
"""

from __future__ import annotations

from sandbox.launch import SandboxProcess, sandbox_argv, sandbox_process
from sandbox.misbehave import Misbehaviour, MisbehaviourRule
from sandbox.scenario import Category, Product, Scenario, WeiboUser, default_scenario, load_scenario
from sandbox.schedules import Schedule
from sandbox.server import SandboxServer

__all__ = [
    "Category",
    "Misbehaviour",
    "MisbehaviourRule",
    "Product",
    "SandboxProcess",
    "SandboxServer",
    "Scenario",
    "Schedule",
    "WeiboUser",
    "default_scenario",
    "load_scenario",
    "sandbox_argv",
    "sandbox_process",
]

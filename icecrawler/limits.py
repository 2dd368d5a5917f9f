"""The largest request each daemon accepts, derived from its batch limit (docs/DEPLOY.md, "Security").

Ice reads a whole request into memory before a servant sees it, and the Python mapping then builds one object
per element, so the per-adapter ``Ice.MessageSizeMax`` is what bounds a request's memory: Ice refuses a larger
message from its 14-byte header, before reading the body, and a bzip2-compressed one as soon as its header names
an uncompressed size over the limit. The limit is the batch limit times the largest legitimate item, plus slack
for the call's other arguments:

* scheduler: a report is ~0.2 KB on the wire with a few new item times and at most ~8.7 KB (1000 item times
  of 8 bytes, a 256-char cursor and error class, the id and token); a listing's report adds its discovered
  product ids, at most ``models.MAX_DISCOVERED_IDS`` = 1000 of at most 64 characters with a length byte:
  65 000 bytes, under ``DISCOVERIES_WIRE_KIB``. So ``scheduler.batch_limit`` x 4 KiB + 64 KiB, plus the slack:
  1000 -> 4 128 KiB, room for 450 reports of the largest kind, or 60 listing reports with 1000 ids of 64
  characters (real product ids are a few characters: 1000 of them take ~10 KB). Clients send at most
  ``client.report_batch`` = 50 reports in one putUsers and, like storage writes, split a call that would not
  fit (``scheduler_message_bytes``, ``crawler_client.sink``);
* storage: a record takes ``RECORD_WIRE_KIB`` on average (a crawled post is ~1-2 KB with its HTML), so
  ``storage.batch_limit`` x 2 KiB: 5000 -> 10 064 KiB. A client splits its writes so that each stays under this
  (``crawler_client.sink``). A record over the whole limit by itself can never be sent: the client drops it alone
  before sending (``storage_record_bytes``, against its exact size), as it does a record the wire cannot carry.

An operator may still set ``<Adapter>.MessageSizeMax`` (KiB) in the daemon's Ice property file; it wins there, but
clients do not see it: they derive theirs from their own batch limits (docs/DEPLOY.md says which to give them).

The memory bound that follows (``rss_bound_mib``): a request being received holds at most the limit in its
buffer; a request being dispatched at most ``AMPLIFICATION`` times the limit in Python objects. The worst case
is the most, smallest items that fit: ~900 000 empty reviews in 9.8 MiB took +150 MiB (~15x; storage), and
~9 million empty ids in one ``addUsers`` take ~40 bytes each (a C++ string, then a list slot: ~40x; scheduler;
a report's discovered ids are at least one character, whose Python string is a shared singleton, so they amplify
no more; estimated, not measured).
A batch of real records takes ~3x. Requests dispatched at once are bounded by the dispatch threads
(``Ice.ThreadPool.Server.SizeMax``: 2 for the scheduler, 8 for the storage server), requests being received by
the connections. A peer silent for ``Ice.Connection.Server.IdleTimeout`` (30 s) is dropped with its partial
request.
"""

from __future__ import annotations

from icecrawler.settings import Settings

__all__ = [
    "AMPLIFICATION",
    "DISCOVERIES_WIRE_KIB",
    "FIXED_SLACK_MIB",
    "RECORD_WIRE_KIB",
    "REPORT_WIRE_KIB",
    "REQUEST_HEADER_BYTES",
    "SLACK_KIB",
    "rss_bound_mib",
    "scheduler_message_bytes",
    "scheduler_message_kib",
    "storage_message_bytes",
    "storage_message_kib",
    "storage_record_bytes",
]

REPORT_WIRE_KIB = 4
#: The most a listing report's discovered ids take on the wire: 1000 ids x (64 characters + a length byte).
DISCOVERIES_WIRE_KIB = 64
RECORD_WIRE_KIB = 2
SLACK_KIB = 64
#: Room for what a one-record request holds besides the record: Ice's request header, the identity, the operation
#: name and the sequence's size (under 100 bytes; generous).
REQUEST_HEADER_BYTES = 1024
#: Most bytes of memory per wire byte of a request being dispatched, per daemon (measured: ~40x, ~15x).
AMPLIFICATION = {"scheduler": 45, "storage": 20}
#: Allocator, caches and store pages a burst may add on top (the SQLite page cache, Berkeley DB pages).
FIXED_SLACK_MIB = 64


def scheduler_message_kib(settings: Settings) -> int:
    return settings.get_int("scheduler.batch_limit") * REPORT_WIRE_KIB + DISCOVERIES_WIRE_KIB + SLACK_KIB


def scheduler_message_bytes(settings: Settings) -> int:
    """What a client may put in one putUsers: the scheduler limit less the slack (headers, encapsulation)."""
    return (scheduler_message_kib(settings) - SLACK_KIB) * 1024


def storage_message_kib(settings: Settings) -> int:
    return settings.get_int("storage.batch_limit") * RECORD_WIRE_KIB + SLACK_KIB


def rss_bound_mib(daemon: str, idle_mib: int, limit_kib: int, *, dispatching: int, receiving: int) -> int:
    """The most ``daemon``'s resident memory may reach with ``dispatching`` requests being dispatched and
    ``receiving`` more being read at once, each at most ``limit_kib`` (see the module docstring)."""
    limit_mib = limit_kib / 1024
    amplification = AMPLIFICATION[daemon]
    return int(idle_mib + FIXED_SLACK_MIB + dispatching * (1 + amplification) * limit_mib + receiving * limit_mib)


def storage_message_bytes(settings: Settings) -> int:
    """What a client may put in one write: the storage limit less the slack (headers, encapsulation)."""
    return (storage_message_kib(settings) - SLACK_KIB) * 1024


def storage_record_bytes(settings: Settings) -> int:
    """The most one record may take in a write: the whole storage request limit less a request's own header. A
    record over it can never be sent (Ice refuses the request, and closes the connection, which looks like an
    outage to the client)."""
    return storage_message_kib(settings) * 1024 - REQUEST_HEADER_BYTES

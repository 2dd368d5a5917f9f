"""The largest request each daemon accepts, derived from its batch limit (docs/DEPLOY.md, "Security").

Ice reads a whole request into memory before a servant sees it, and the Python mapping then builds one object
per element, so the per-adapter ``Ice.MessageSizeMax`` is what bounds a request's memory: Ice refuses a larger
message from its 14-byte header, before reading the body, and a bzip2-compressed one as soon as its header names
an uncompressed size over the limit. The limit is the batch limit times the largest legitimate item, plus slack
for the call's other arguments:

* scheduler: a report is at most ~8.7 KB on the wire (1000 item times of 8 bytes, a 256-char cursor and error
  class, the id and token), so ``scheduler.batch_limit`` x 9 KiB: 1000 -> 9 064 KiB;
* storage: a record of ``storage.batch_limit`` records takes ``RECORD_WIRE_KIB`` on average (a crawled post is
  ~1-2 KB with its HTML), so ``storage.batch_limit`` x 2 KiB: 5000 -> 10 064 KiB. A client splits its writes
  so that each stays under this (``crawler_client.sink``).

An operator may still set ``<Adapter>.MessageSizeMax`` (KiB) in the daemon's Ice property file; it wins.
"""

from __future__ import annotations

from icecrawler.settings import Settings

__all__ = [
    "RECORD_WIRE_KIB",
    "REPORT_WIRE_KIB",
    "SLACK_KIB",
    "scheduler_message_kib",
    "storage_message_bytes",
    "storage_message_kib",
]

REPORT_WIRE_KIB = 9
RECORD_WIRE_KIB = 2
SLACK_KIB = 64


def scheduler_message_kib(settings: Settings) -> int:
    return settings.get_int("scheduler.batch_limit") * REPORT_WIRE_KIB + SLACK_KIB


def storage_message_kib(settings: Settings) -> int:
    return settings.get_int("storage.batch_limit") * RECORD_WIRE_KIB + SLACK_KIB


def storage_message_bytes(settings: Settings) -> int:
    """What a client may put in one write: the storage limit less the slack (headers, encapsulation)."""
    return (storage_message_kib(settings) - SLACK_KIB) * 1024

"""Which scheduler shard owns a task: the one its host hashes to (pure logic, shared by servers and clients).

One scheduler process keeps up to one core busy, since Python runs one thread at a time. To go past that, the
scheduler can run as N shard processes (``scheduler.shards``), each with its own Berkeley DB environment and
its own endpoint. Politeness is kept per host (spacing, Retry-After and ban blocks), so every task of a host
lives on one shard, as URL frontiers partition by host: a task belongs to shard ``crc32(host) % N``, where
the host is the netloc of its source's ``sources.<source>.base_url``. The scheduler shards, the clients'
gateway, ``seed`` and ``status`` all route with this one function; clients list the shards in order in the
``Scheduler.Proxies`` Ice property.
"""

from __future__ import annotations

import zlib
from urllib.parse import urlsplit

from icecrawler.errors import ConfigError
from icecrawler.models import SOURCES
from icecrawler.settings import Settings

__all__ = ["ShardMap", "shard_of_host", "source_hosts", "task_source"]


def source_hosts(settings: Settings) -> dict[str, str]:
    """source -> host (netloc of ``sources.<source>.base_url``): the unit of politeness and of sharding."""
    return {source: urlsplit(settings.get_str(f"sources.{source}.base_url")).netloc for source in SOURCES}


def shard_of_host(host: str, shards: int) -> int:
    """The shard (0 .. shards-1) that owns ``host``; stable across processes, machines and Python versions."""
    return zlib.crc32(host.encode()) % shards


def task_source(task_id: str) -> str:
    """The source of a ``kind:source:target`` task id; "" for anything else (which no source owns)."""
    parts = task_id.split(":")
    return parts[1] if len(parts) == 3 else ""


class ShardMap:
    """Routes sources, task ids (``kind:source:target``) and targets (``source:target``) to shards."""

    def __init__(self, hosts: dict[str, str], shards: int) -> None:
        if shards < 1:
            raise ConfigError(f"the number of scheduler shards must be >= 1, got {shards}")
        self.shards = shards
        self._by_source = {source: shard_of_host(host, shards) for source, host in hosts.items()}

    @classmethod
    def from_settings(cls, settings: Settings, shards: int) -> ShardMap:
        return cls(source_hosts(settings), shards)

    def of_source(self, source: str) -> int:
        """The source's shard; an unknown source goes to shard 0, whose scheduler rejects it with InvalidId."""
        return self._by_source.get(source, 0)

    def of_task(self, task_id: str) -> int:
        return self.of_source(task_source(task_id))

    def of_target(self, text: str) -> int:
        """For ``<source>:<target>`` ids as ``addUsers`` takes them."""
        return self.of_source(text.partition(":")[0])

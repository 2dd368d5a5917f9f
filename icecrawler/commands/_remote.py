"""Shared by the client-side subcommands (seed, status): reach a server, with unreachable = a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import Ice

from icecrawler import rpc
from icecrawler.errors import ServiceError

__all__ = ["remote_calls"]


@contextmanager
def remote_calls(what: str) -> Iterator[None]:
    """Slice exceptions become core errors; transport failures become ServiceError naming ``what``."""
    try:
        with rpc.core_errors():
            yield
    except Ice.LocalException as exc:
        raise ServiceError(f"cannot reach the {what}: {type(exc).__name__}: {exc}") from exc

"""How a daemon starts listening: its endpoints (command line, property file, default), the listening policy
and a port probe before it opens its data, then the adapter itself (``rpc.serve`` activates it).

Kept apart from ``rpc`` so that the policy (``icecrawler.security``) is loaded only by the daemons.
"""

from __future__ import annotations

import logging

import Ice

from icecrawler.errors import ServiceError

__all__ = ["create_adapter", "listen_endpoints", "one_line", "prepare_adapter"]

log = logging.getLogger(__name__)


def prepare_adapter(
    comm: Ice.Communicator,
    adapter_name: str,
    default_endpoints: str,
    *,
    endpoints: str = "",
    allow_insecure: bool = False,
    message_size_max_kib: int = 0,
) -> str:
    """Check and set a daemon's listening properties before it opens its data, so that a bad endpoint, a plain
    one off loopback, or a port in use fails the start-up at once (ConfigError/ServiceError, one line). Returns
    the endpoints.

    Endpoints: ``endpoints`` (the command line's ``--listen``), else ``<adapter_name>.Endpoints`` (property file /
    argv), else ``default_endpoints``; a plain endpoint off loopback needs ``allow_insecure``
    (``security.check_listen_endpoints``). ``message_size_max_kib`` becomes ``<adapter_name>.MessageSizeMax``
    unless that is set (``icecrawler.limits``). The port is only probed here; ``create_adapter`` binds it once
    the daemon is ready, so that a port that accepts connections means a daemon that answers them.
    """
    from icecrawler.security import check_listen_endpoints, check_ports_free

    props = comm.getProperties()
    listen = listen_endpoints(comm, adapter_name, default_endpoints, endpoints)
    for warning in check_listen_endpoints(comm, listen, allow_insecure):
        log.warning("%s", warning)
    check_ports_free(comm, listen)
    if message_size_max_kib > 0 and not props.getProperty(f"{adapter_name}.MessageSizeMax"):
        props.setProperty(f"{adapter_name}.MessageSizeMax", str(message_size_max_kib))
    return listen


def create_adapter(comm: Ice.Communicator, adapter_name: str) -> Ice.ObjectAdapter:
    """Create (and bind) ``adapter_name``; a failure is a one-line ServiceError.

    An adapter's own thread pool (``<adapter_name>.ThreadPool.*``) becomes the communicator's server pool (the
    same thing for a daemon's one adapter): when binding fails, Ice joins an adapter's own pool threads inside
    ``createObjectAdapter``, which holds the GIL, while each thread waits for the GIL in our thread hooks, so
    the daemon hung forever on a port in use.
    """
    props = comm.getProperties()
    for key, value in props.getPropertiesForPrefix(f"{adapter_name}.ThreadPool.").items():
        props.setProperty("Ice.ThreadPool.Server." + key.rsplit(".", 1)[1], value)
        props.setProperty(key, "")
    try:
        return comm.createObjectAdapter(adapter_name)
    except Ice.LocalException as exc:
        listen = props.getProperty(f"{adapter_name}.Endpoints")
        raise ServiceError(f"{adapter_name} cannot listen on {listen}: {one_line(exc)}") from exc


def listen_endpoints(comm: Ice.Communicator, adapter_name: str, default_endpoints: str, endpoints: str = "") -> str:
    """The endpoints ``adapter_name`` will listen on (``endpoints`` if given, else its property, else the default),
    set as its ``Endpoints`` property."""
    props = comm.getProperties()
    key = f"{adapter_name}.Endpoints"
    if endpoints:
        props.setProperty(key, endpoints)
    elif not props.getProperty(key):
        props.setProperty(key, default_endpoints)
    return props.getProperty(key)


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its class and the first line of its text (Ice's can span several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__

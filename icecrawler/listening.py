"""How a daemon starts listening, before it opens its data: its endpoints (command line, property file, default),
the listening policy (``icecrawler.security``) and a port probe, and the gate its servants check callers with. The
adapter itself is created later by ``rpc.serve``.

Only the daemons import this module, so a client never loads the certificate code the policy needs; ``rpc``
holds the mechanism both use (``listen_endpoints``, ``create_adapter``, ``one_line``).
"""

from __future__ import annotations

import logging

import Ice

from icecrawler.rpc import listen_endpoints
from icecrawler.security import Gate, check_listen_endpoints, check_ports_free, has_secure_endpoint
from icecrawler.settings import Settings

__all__ = ["guarded_listening", "prepare_adapter"]

log = logging.getLogger(__name__)


def guarded_listening(
    comm: Ice.Communicator,
    settings: Settings,
    adapter_name: str,
    default_endpoints: str,
    *,
    listen: str,
    message_size_max_kib: int,
) -> Gate:
    """A daemon's listening set-up before it opens its data (``prepare_adapter``: bad endpoints, plain
    TCP off loopback without ``security.allow_insecure``, a port in use), and the gate its servants check callers
    with: certificate roles when an endpoint is TLS, ``security.revoked`` refused."""
    endpoints = prepare_adapter(
        comm,
        adapter_name,
        default_endpoints,
        endpoints=listen,
        allow_insecure=settings.get_bool("security.allow_insecure"),
        message_size_max_kib=message_size_max_kib,
    )
    return Gate.from_setting(settings.get_str("security.revoked"), tls=has_secure_endpoint(comm, endpoints))


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
    props = comm.getProperties()
    listen = listen_endpoints(comm, adapter_name, default_endpoints, endpoints)
    for warning in check_listen_endpoints(comm, listen, allow_insecure):
        log.warning("%s", warning)
    check_ports_free(comm, listen)
    if message_size_max_kib > 0 and not props.getProperty(f"{adapter_name}.MessageSizeMax"):
        props.setProperty(f"{adapter_name}.MessageSizeMax", str(message_size_max_kib))
    return listen

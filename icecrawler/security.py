"""Who may call what: the listening policy of the daemons and the certificate roles their servants check.

Trust model (docs/DEPLOY.md, "Security"):

* A plain-TCP endpoint carries no identity, so whoever reaches it is trusted with everything. The daemons
  therefore listen on loopback by default, and refuse to start with a plain endpoint on any other interface
  unless ``security.allow_insecure`` says so (then they warn).
* Over TLS (``ssl`` endpoints, ``icecrawler certs``) the handshake admits only certificates of our CA, and each
  operation is allowed by the role that ``icecrawler certs issue --role`` wrote into the certificate as the
  subjectAltName URI ``icecrawler:role:<role>``: ``client`` leases, reports (a listing report's discovered product ids
  included: the scheduler adds them with the report, for the leased listing's own source only), writes records and
  reads status; ``admin`` also adds and removes any target (``addUsers``, seeding; ``removeUsers``), holds hosts
  (``holdHost``) and does everything except receive account cookies; ``reader`` reads status. A certificate without a
  role, or revoked by ``security.revoked`` (serial numbers or CNs), may call nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable
from typing import Any

import Ice
from cryptography import x509
from cryptography.x509.oid import NameOID

from icecrawler.errors import ConfigError, NotAuthorizedError, ServiceError
from icecrawler.tls import ROLE_URI_PREFIX, ROLES

__all__ = [
    "PERMISSIONS",
    "ROLES",
    "ROLE_URI_PREFIX",
    "TRUSTED",
    "Gate",
    "check_listen_endpoints",
    "check_ports_free",
    "guarded",
    "has_secure_endpoint",
    "is_loopback_host",
    "role_of_certificate",
]

log = logging.getLogger(__name__)

#: What each role may do. ``cookies``: receive an account's cookie blob with a lease; ``add``: add any target
#: (``addUsers``); ``remove``: remove any target (``removeUsers``); ``hold``: hold a host (``holdHost``). A client
#: needs no ``add``: what its listing crawls discover travels in their reports.
PERMISSIONS: dict[str, frozenset[str]] = {
    "client": frozenset({"lease", "report", "write", "status", "cookies"}),
    "admin": frozenset({"lease", "report", "write", "status", "add", "remove", "hold"}),
    "reader": frozenset({"status"}),
}
#: A plain-TCP or in-process peer: trusted (the listening policy decides who can reach a plain endpoint).
TRUSTED = frozenset({"lease", "report", "write", "status", "cookies", "add", "remove", "hold"})
NOTHING: frozenset[str] = frozenset()


def role_of_certificate(pem: str) -> tuple[str, str, str]:
    """(role, common name, serial in lower-case hex) of a PEM certificate; role is "" when it names none."""
    cert = x509.load_pem_x509_certificate(pem.encode())
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else ""
    role = ""
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        alt = None
    if alt is not None:
        for uri in alt.get_values_for_type(x509.UniformResourceIdentifier):
            if uri.startswith(ROLE_URI_PREFIX):
                role = uri[len(ROLE_URI_PREFIX) :]
    return role, common_name, format(cert.serial_number, "x")


def _ssl_info(current: Any) -> Any:
    """The SSL connection info of the call's connection, or None for plain TCP or an in-process call."""
    connection = getattr(current, "con", None)
    if connection is None:
        return None
    info = connection.getInfo()
    while info is not None and not isinstance(info, Ice.SSLConnectionInfo):
        info = info.underlying
    return info


class Gate:
    """A servant's check of its caller: ``allowed(current)`` is the caller's permission set; ``require`` raises
    NotAuthorizedError. Roles are read once per certificate (cached), so a call costs one ``getInfo``;
    ``tls=False`` (no ssl endpoint on the adapter) skips even that."""

    def __init__(self, revoked: Iterable[str] = (), *, tls: bool = True) -> None:
        # Serials as `openssl x509 -serial` prints them (upper case, zero-padded) or as we format them; or CNs.
        self.revoked = frozenset(item.strip().lower() for item in revoked if item.strip())
        self._revoked_serials = frozenset(item.lstrip("0") for item in self.revoked)
        self.tls = tls
        self._by_pem = functools.lru_cache(maxsize=1024)(self._permissions_of)

    @classmethod
    def from_setting(cls, revoked: str, *, tls: bool = True) -> Gate:
        return cls(revoked.split(","), tls=tls)

    def _permissions_of(self, pem: str) -> frozenset[str]:
        if not pem:
            return NOTHING
        try:
            role, common_name, serial = role_of_certificate(pem)
        except ValueError:
            return NOTHING
        if serial.lstrip("0") in self._revoked_serials or common_name.lower() in self.revoked:
            log.warning("refused revoked certificate CN=%s serial %s", common_name, serial)
            return NOTHING
        return PERMISSIONS.get(role, NOTHING)

    def allowed(self, current: Any) -> frozenset[str]:
        if not self.tls:
            return TRUSTED
        info = _ssl_info(current)
        if info is None:
            return TRUSTED
        return self._by_pem(str(info.peerCertificate or ""))

    def require(self, current: Any, permission: str, operation: str) -> frozenset[str]:
        allowed = self.allowed(current)
        if permission not in allowed:
            raise NotAuthorizedError(
                f"{operation}: this certificate's role may not {permission} (see `icecrawler certs issue --role`)"
            )
        return allowed


def guarded[F: Callable[..., Any]](permission: str) -> Callable[[F], F]:
    """Servant method decorator: the servant's ``gate`` must allow ``permission`` to the caller (the method's
    last argument is Ice's ``current``)."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any) -> Any:
            self.gate.require(args[-1], permission, method.__name__)
            return method(self, *args)

        return wrapper  # type: ignore[return-value]

    return decorate


# --- the listening policy ------------------------------------------------------------------------------------


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address or a name) is loopback only; "", "*", 0.0.0.0 and :: mean every interface."""
    if host in ("", "*"):
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)


def _ip_info(info: Any) -> Any:
    while info is not None and not isinstance(info, Ice.IPEndpointInfo):
        info = info.underlying
    return info


#: "-h *" (every interface) is valid for a server but not in a proxy, which is how endpoints are parsed here.
_ANY_HOST = re.compile(r'-h\s+"?\*"?(?=\s|:|$)')


def _parse(comm: Ice.Communicator, endpoints: str) -> list[Any]:
    try:
        proxy = comm.stringToProxy("probe:" + _ANY_HOST.sub("-h 0.0.0.0", endpoints))
        parsed = proxy.ice_getEndpoints() if proxy is not None else []
    except Ice.LocalException as exc:
        raise ConfigError(f"bad endpoints {endpoints[:200]!r}: {str(exc).splitlines()[0][:200]}") from exc
    if not parsed:
        raise ConfigError(f"bad endpoints {endpoints[:200]!r}: no endpoint")
    return list(parsed)


def check_listen_endpoints(comm: Ice.Communicator, endpoints: str, allow_insecure: bool) -> list[str]:
    """Refuse (ConfigError) a plain endpoint that is reachable from other machines, unless ``allow_insecure``;
    then return one warning per such endpoint. A malformed endpoint string is a ConfigError too."""
    parsed = _parse(comm, endpoints)
    warnings: list[str] = []
    for endpoint in parsed:
        info = endpoint.getInfo()
        ip = _ip_info(info)
        if info.secure() or (ip is not None and is_loopback_host(ip.host)):
            continue
        text = endpoint.toString()
        if not allow_insecure:
            raise ConfigError(
                f"refusing to listen on {text}: a plain endpoint reachable from other machines "
                "trusts anyone who can connect; use ssl (icecrawler certs), a loopback address, or "
                "--set security.allow_insecure=true"
            )
        warnings.append(
            f"INSECURE: {text} is plain TCP on a non-loopback interface: anyone who reaches it may call "
            "every operation (security.allow_insecure=true)"
        )
    return warnings


def check_ports_free(comm: Ice.Communicator, endpoints: str) -> None:
    """ServiceError if a fixed port of ``endpoints`` is taken (probed with a bind, as Ice binds: SO_REUSEADDR, so
    only a listening socket counts), so that a daemon fails before it opens its data rather than after."""
    for endpoint in _parse(comm, endpoints):
        ip = _ip_info(endpoint.getInfo())
        if ip is None or not ip.port:
            continue
        try:
            addresses = socket.getaddrinfo(ip.host or None, ip.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except OSError:
            continue  # an unresolvable host: Ice's own bind says so
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(address)
                except OSError as exc:
                    raise ServiceError(f"cannot listen on {endpoint.toString()}: {exc.strerror or exc}") from exc


def has_secure_endpoint(comm: Ice.Communicator, endpoints: str) -> bool:
    """Whether any endpoint of ``endpoints`` is TLS (then the servants check certificates)."""
    return any(endpoint.getInfo().secure() for endpoint in _parse(comm, endpoints))

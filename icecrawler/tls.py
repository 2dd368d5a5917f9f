"""A private certificate authority for a small icecrawler deployment, and the IceSSL properties that use it.

Every machine (IceGrid node, scheduler, storage, crawler client) gets its own key and certificate signed by one
private CA. Servers require a client certificate (``IceSSL.VerifyPeer=2``) and accept only the distinguished
names they are told to (``IceSSL.TrustOnly.Server``), so a stolen endpoint address alone is worthless and a
certificate from any other CA is refused during the TLS handshake.

Files (PEM), all in one directory:

* ``ca.pem`` / ``ca-key.pem``: the CA certificate (distribute) and its key (keep on the admin machine only).
* ``<node>.pem`` / ``<node>-key.pem``: one node's certificate and key (copy to that node only).
* ``<node>-ssl.conf``: ready-to-use Ice properties for that node (``--Ice.Config=<node>-ssl.conf``).

Keys are EC P-256 and written unencrypted with mode 0600: Ice reads them at start-up with no password prompt,
so the file permission is the protection. The pure functions here do no network I/O; ``icecrawler certs``
is the command-line front end.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from icecrawler import durable
from icecrawler.errors import ConfigError

#: The roles ``issue`` may write (what each allows: ``icecrawler.security.PERMISSIONS``).
ROLES = ("client", "admin", "reader")
ROLE_URI_PREFIX = "icecrawler:role:"

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "ORGANIZATION",
    "NodeFiles",
    "init_ca",
    "issue",
    "node_dn",
    "ssl_properties",
    "write_properties",
]

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
#: The O= of every certificate the CA issues; ``IceSSL.TrustOnly.Server=O=icecrawler`` accepts them all.
ORGANIZATION = "icecrawler"

_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # fullmatch only


@dataclass(frozen=True)
class NodeFiles:
    """Where one node's certificate material lives."""

    cert: Path
    key: Path
    properties: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _valid_until(days: int) -> datetime.datetime:
    """When a certificate valid for ``days`` from now ends: at least a day, and not past the year 9999, the last an
    X.509 date can be in (and past which Python's dates overflow), or a ConfigError naming ``--days``."""
    if days < 1:
        raise ConfigError(f"--days must be at least 1, got {days}")
    try:
        return _now() + datetime.timedelta(days=days)
    except OverflowError:
        raise ConfigError(f"--days {days}: the certificate would end after the year 9999, the last it can") from None


def _write_pair(key_path: Path, key: ec.EllipticCurvePrivateKey, cert_path: Path, cert: x509.Certificate) -> None:
    """Write a key (mode 0600 from its first byte: never world-readable, not even briefly) and its certificate, each
    whole (``durable.write_whole``): a run killed midway leaves whole files, at worst the new key beside the old
    certificate, which ``_load_ca`` names as a pair that does not match."""
    durable.write_whole(key_path, _key_pem(key), mode=0o600)
    durable.write_whole(cert_path, cert.public_bytes(serialization.Encoding.PEM))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def node_dn(node: str, organization: str = ORGANIZATION) -> str:
    """The RFC 2253 subject of a node certificate, as written in ``IceSSL.TrustOnly.*`` filters."""
    return f"CN={node},O={organization}"


def init_ca(directory: Path, *, name: str = "icecrawler CA", days: int = 3650, force: bool = False) -> Path:
    """Create the CA key and self-signed certificate in ``directory``; returns the certificate path.

    Refuses to overwrite an existing CA unless ``force``: re-creating it would silently invalidate every node
    certificate already issued.
    """
    until = _valid_until(days)
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if cert_path.exists() and key_path.exists() and not force:
        raise ConfigError(f"a CA already exists in {directory} (use --force to replace it and re-issue every node)")
    if (cert_path.exists() or key_path.exists()) and not force:
        raise _half_a_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, name), x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_pair(key_path, key, cert_path, cert)
    return cert_path


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not cert_path.exists() and not key_path.exists():
        raise ConfigError(f"no CA in {directory}: run `icecrawler certs init --dir {directory}` first")
    if not cert_path.exists() or not key_path.exists():
        raise _half_a_ca(directory)
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except ValueError as exc:
        reason = _first_line(exc)
        raise ConfigError(f"{cert_path} is not a PEM certificate ({reason}): damaged, or another file") from exc
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:  # TypeError: a key that needs a password
        raise ConfigError(f"{key_path} is not a PEM key without a password ({_first_line(exc)})") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{key_path} is not an EC key written by `icecrawler certs init`")
    if key.public_key() != cert.public_key():
        raise ConfigError(
            f"{key_path} is not the key of {cert_path} (files of two CAs, or a `certs init --force` stopped midway): "
            f"put the pair back from your copy, or run `icecrawler certs init --dir {directory} --force` and re-issue "
            "every node"
        )
    return cert, key


def _half_a_ca(directory: Path) -> ConfigError:
    there, missing = (CA_CERT, CA_KEY) if (directory / CA_CERT).exists() else (CA_KEY, CA_CERT)
    return ConfigError(
        f"{directory} holds {there} but no {missing} (a `certs init` stopped midway, or a file removed): put it back "
        f"from your copy, or run `icecrawler certs init --dir {directory} --force` and re-issue every node"
    )


def _first_line(exc: Exception) -> str:
    """cryptography's message without its link to the FAQ."""
    return str(exc).split(". See ", 1)[0].splitlines()[0][:200] if str(exc) else type(exc).__name__


def issue(
    directory: Path,
    node: str,
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    days: int = 825,
    trust: Sequence[str] = (),
    force: bool = False,
    install_dir: Path | None = None,
    role: str | None = None,
) -> NodeFiles:
    """Issue ``node``'s key and certificate (signed by the CA in ``directory``) and its ssl property file.

    The certificate is valid for both TLS roles (serverAuth + clientAuth): an IceGrid node or a scheduler is a
    server to crawler clients and a client of the registry. ``dns``/``ips`` become subjectAltNames (the node
    name is always one), so ``IceSSL.CheckCertName=1`` can be used. ``trust`` lists the DNs this node accepts as
    peers when it is a server (default: every certificate of our organization). ``install_dir`` is where the
    files will live on the node (the property file's ``IceSSL.DefaultDir``; default: ``directory``).
    ``role`` (client, admin or reader; ``icecrawler.security``) is written as the subjectAltName URI
    ``icecrawler:role:<role>`` (the subject stays CN=<node>,O=icecrawler); the servants allow each operation
    by it. Without a role the certificate can serve (a daemon's own) but may call no operation.
    """
    if role is not None and role not in ROLES:
        raise ConfigError(f"bad role {role[:40]!r}: use one of {', '.join(ROLES)}")
    if not _NODE_NAME.fullmatch(node):
        raise ConfigError(f"bad node name {node!r}: use letters, digits, '.', '_' or '-' (at most 63)")
    until = _valid_until(days)
    files = NodeFiles(directory / f"{node}.pem", directory / f"{node}-key.pem", directory / f"{node}-ssl.conf")
    if files.cert.exists() and not force:
        raise ConfigError(f"{files.cert} already exists (use --force to re-issue it)")
    ca_cert, ca_key = _load_ca(directory)
    try:
        addresses = [ipaddress.ip_address(ip) for ip in ips]
    except ValueError as exc:
        raise ConfigError(f"bad --ip value: {exc}") from exc
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, node), x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
    )
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dict.fromkeys([node, *dns])]
    names += [x509.IPAddress(address) for address in addresses]
    if role:
        names.append(x509.UniformResourceIdentifier(f"{ROLE_URI_PREFIX}{role}"))
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(until, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_agreement=True,
                content_commitment=False,
                data_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_pair(files.key, key, files.cert, cert)
    write_properties(files.properties, install_dir or directory, node, trust=trust)
    return files


def ssl_properties(directory: Path, node: str, *, trust: Sequence[str] = ()) -> dict[str, str]:
    """IceSSL properties for ``node``: its own certificate, our CA, client certificates required.

    ``trust`` are DNs (``CN=client-1,O=icecrawler``) or partial DNs (``O=icecrawler``) a server accepts from
    its peers; several are joined with ``;`` (any one matches). Default: any certificate of our organization.
    """
    return {
        "IceSSL.DefaultDir": str(directory.resolve()),
        "IceSSL.CAs": CA_CERT,
        "IceSSL.CertFile": f"{node}.pem",
        "IceSSL.KeyFile": f"{node}-key.pem",
        # 2 = a server refuses a peer that presents no certificate; clients always verify the server.
        "IceSSL.VerifyPeer": "2",
        "IceSSL.TrustOnly.Server": ";".join(trust) if trust else f"O={ORGANIZATION}",
    }


def write_properties(path: Path, directory: Path, node: str, *, trust: Sequence[str] = ()) -> Path:
    """Write ``ssl_properties`` as an Ice property file with comments saying what to change."""
    lines = [
        f"# IceSSL properties for node {node} (generated by `icecrawler certs issue`).",
        f"# Use: icecrawler <role> --Ice.Config={path.name} (plus the role's own config), with ssl endpoints, e.g.",
        "#   SchedulerAdapter.Endpoints=ssl -h 0.0.0.0 -p 10000",
        "#   Scheduler.Proxy=scheduler:ssl -h scheduler.example -p 10000",
        "# IceSSL.TrustOnly.Server lists the DNs a server accepts (';' separates alternatives, '!' rejects).",
        "",
    ]
    lines += [f"{key}={value}" for key, value in ssl_properties(directory, node, trust=trust).items()]
    durable.write_whole(path, ("\n".join(lines) + "\n").encode())
    return path

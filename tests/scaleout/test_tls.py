"""TLS between machines: the real scheduler daemon on an ``ssl`` endpoint with certificates from
``icecrawler certs``; a client with a valid certificate works, every other client is refused in the handshake.

Why these cases: the point of per-node certificates is that knowing the scheduler's address is not enough.
A client without a certificate, one from another CA, or one from our CA whose DN the server was not told to
accept must all fail before any operation is dispatched (the scheduler's task count stays unchanged).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import Ice
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from icecrawler import rpc, tls
from icecrawler.processes import ProcessGroup, free_port, icecrawler_argv
from icecrawler_local.launcher import Cluster

pytestmark = [pytest.mark.ice, pytest.mark.e2e, pytest.mark.slow]

#: What a refused TLS handshake may look like from the client's side (the server aborts it, or our own
#: verification of a server certificate fails). Any of them means: no operation was dispatched.
REFUSED = (Ice.ConnectionLostException, Ice.ProtocolException, Ice.SecurityException, Ice.SocketException)


def _write_conf(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Our CA with certificates for the scheduler, a trusted client and an untrusted one; a foreign CA."""
    base = tmp_path_factory.mktemp("pki")
    ours, theirs = base / "ours", base / "theirs"
    tls.init_ca(ours)
    tls.issue(ours, "scheduler", ips=["127.0.0.1"])
    tls.issue(ours, "client-ok", role="admin")  # adds tasks (role checks: test_roles.py)
    tls.issue(ours, "client-other", role="admin")
    tls.init_ca(theirs, name="someone else's CA")
    tls.issue(theirs, "client-ok", role="admin")  # same DN as the trusted client, wrong issuer
    return {"ours": ours, "theirs": theirs, "base": base}


@pytest.fixture(scope="module")
def tls_scheduler(pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real ``icecrawler scheduler`` with only an ssl endpoint, accepting only CN=client-ok from our CA.

    Yields the proxy string clients use.
    """
    work = tmp_path_factory.mktemp("tls-scheduler")
    port = free_port()
    props = tls.ssl_properties(pki["ours"], "scheduler", trust=[tls.node_dn("client-ok")])
    with ProcessGroup(work / "logs") as group:
        process = Cluster(work, group).start_server(
            "scheduler", "127.0.0.1", port, ice=props, protocol="ssl", timeout_s=30
        )
        yield f"scheduler:ssl -h 127.0.0.1 -p {port}"
        assert process.alive(), process.log_tail()


def _client(pki_dir: Path | None, node: str | None, ca: Path) -> Ice.Communicator:
    """A client communicator: our CA to verify the server, plus ``node``'s certificate if given."""
    props = {"IceSSL.CAs": str(ca)}
    if pki_dir is not None and node is not None:
        props["IceSSL.CertFile"] = str(pki_dir / f"{node}.pem")
        props["IceSSL.KeyFile"] = str(pki_dir / f"{node}-key.pem")
    return rpc.communicator((), props)


def _task_count(proxy: str, pki: dict[str, Path]) -> int:
    with _client(pki["ours"], "client-ok", pki["ours"] / tls.CA_CERT) as comm:
        return int(rpc.crawler().SchedulerPrx(comm, proxy).stats().tasks)


def test_client_with_valid_certificate_works(tls_scheduler: str, pki: dict[str, Path]) -> None:
    C = rpc.crawler()
    with _client(pki["ours"], "client-ok", pki["ours"] / tls.CA_CERT) as comm:
        scheduler = C.SchedulerPrx(comm, tls_scheduler)
        added = scheduler.addUsers(["weibo_mobile:1907518591", "weibo_pc:1163218074"], C.TaskKind.WeiboUser)
        assert added == 2
        assert scheduler.stats().tasks >= 2
        info = scheduler.ice_getConnection().getInfo()
        # The connection really is TLS, with the server's certificate from our CA.
        while info.underlying is not None and not isinstance(info, Ice.SSLConnectionInfo):
            info = info.underlying
        assert isinstance(info, Ice.SSLConnectionInfo)
        peer = x509.load_pem_x509_certificate(str(info.peerCertificate).encode())
        assert peer.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "scheduler"


def test_cli_with_valid_certificate_works(tls_scheduler: str, pki: dict[str, Path]) -> None:
    """The shipped commands work over TLS with nothing but the generated property file."""
    conf = pki["base"] / "cli-client.conf"
    props = tls.ssl_properties(pki["ours"], "client-ok")
    props["Scheduler.Proxy"] = tls_scheduler
    _write_conf(conf, props)
    seeded = subprocess.run(
        icecrawler_argv("seed", "ecshop:12", f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60
    )
    assert seeded.returncode == 0, seeded.stderr
    status = subprocess.run(
        icecrawler_argv("status", "--json", f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr
    assert '"tasks"' in status.stdout


@pytest.mark.parametrize("who", ["no certificate", "certificate from another CA", "our CA, DN not trusted"])
def test_other_clients_are_refused(who: str, tls_scheduler: str, pki: dict[str, Path]) -> None:
    before = _task_count(tls_scheduler, pki)
    if who == "no certificate":
        comm = _client(None, None, pki["ours"] / tls.CA_CERT)
    elif who == "certificate from another CA":
        comm = _client(pki["theirs"], "client-ok", pki["ours"] / tls.CA_CERT)
    else:
        comm = _client(pki["ours"], "client-other", pki["ours"] / tls.CA_CERT)
    C = rpc.crawler()
    with comm:
        scheduler = C.SchedulerPrx(comm, tls_scheduler)
        with pytest.raises(REFUSED):
            scheduler.addUsers([f"weibo_pc:{abs(hash(who)) % 10**9}"], C.TaskKind.WeiboUser)
    assert _task_count(tls_scheduler, pki) == before


def test_cli_without_certificate_is_refused(tls_scheduler: str, pki: dict[str, Path]) -> None:
    conf = _write_conf(
        pki["base"] / "nocert.conf", {"IceSSL.CAs": str(pki["ours"] / tls.CA_CERT), "Scheduler.Proxy": tls_scheduler}
    )
    result = subprocess.run(
        icecrawler_argv("status", f"--Ice.Config={conf}"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "cannot reach the scheduler" in result.stderr


def test_certs_command_writes_usable_files(tmp_path: Path) -> None:
    """`icecrawler certs init|issue` from the command line: files, modes, subject, and --help."""
    run = [sys.executable, "-m", "icecrawler_cli", "certs"]
    assert subprocess.run([*run, "init", "--dir", str(tmp_path)], capture_output=True, timeout=60).returncode == 0
    issued = subprocess.run(
        [*run, "issue", "node-7", "--dir", str(tmp_path), "--ip", "10.0.0.7"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert issued.returncode == 0, issued.stderr
    assert (tmp_path / "node-7-key.pem").stat().st_mode & 0o077 == 0
    assert (tmp_path / tls.CA_KEY).stat().st_mode & 0o077 == 0
    text = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "node-7.pem"), "-noout", "-subject", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert "CN = node-7" in text and "IP Address:10.0.0.7" in text
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / tls.CA_CERT), str(tmp_path / "node-7.pem")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert verify.returncode == 0, verify.stderr
    again = subprocess.run([*run, "init", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--dir" in helped.stdout and "issue" in helped.stdout

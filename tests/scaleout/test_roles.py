"""Certificate roles over real IceSSL: the real scheduler and storage daemons on ssl endpoints, and a caller for
every role (client, admin, reader, no role, a revoked admin) calling every operation.

Why: TLS alone admitted any certificate of our CA to every operation, so a stolen crawler certificate could add
tasks, and any peer could read account cookies. Each operation must be refused with the declared NotAuthorized
(and change nothing) unless the role allows it; account cookies go to clients only; a peer with no certificate or
one from another CA never gets past the handshake.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import Ice
import pytest

from icecrawler import rpc, tls
from icecrawler.processes import ProcessGroup, free_port
from icecrawler_local.launcher import Cluster

pytestmark = [pytest.mark.ice, pytest.mark.e2e]

REFUSED = (Ice.ConnectionLostException, Ice.ProtocolException, Ice.SecurityException, Ice.SocketException)
COOKIES = "SUB=secret-cookie; SUBP=also-secret"
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("pki")
    ours, theirs = base / "ours", base / "theirs"
    tls.init_ca(ours)
    tls.issue(ours, "server", ips=["127.0.0.1"])
    for role in tls.ROLES:
        tls.issue(ours, role, role=role)
    tls.issue(ours, "norole")
    tls.issue(ours, "revoked-admin", role="admin")
    tls.init_ca(theirs, name="someone else's CA")
    tls.issue(theirs, "admin", role="admin")  # same name and role, wrong issuer
    return {"ours": ours, "theirs": theirs, "base": base}


@pytest.fixture(scope="module")
def daemons(pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The scheduler (with one logged-in weibo_pc account) and the storage server, each on an ssl endpoint only.
    Yields their proxy strings."""
    work = tmp_path_factory.mktemp("roles")
    accounts = work / "accounts"
    accounts.mkdir()
    (accounts / "weibo.toml").write_text(f'[[account]]\nid = "acct-1"\ncookies = "{COOKIES}"\n')
    (accounts / "weibo.toml").chmod(0o600)
    ports = {"scheduler": free_port(), "storage": free_port()}
    ssl = tls.ssl_properties(pki["ours"], "server")
    with ProcessGroup(work / "logs") as group:
        cluster = Cluster(
            work,
            group,
            settings={
                "security.revoked": "revoked-admin",
                "scheduler.accounts_dir": str(accounts),
                "scheduler.account_sources": "weibo_pc",
            },
        )
        scheduler, storage = (
            cluster.start_server(name, "127.0.0.1", ports[name], ice=ssl, protocol="ssl", wait=False)
            for name in ("scheduler", "storage")
        )
        for process, port in ((scheduler, ports["scheduler"]), (storage, ports["storage"])):
            cluster.wait_listening(process, "127.0.0.1", port, timeout_s=30)
        yield {name: f"{name}:ssl -h 127.0.0.1 -p {port}" for name, port in ports.items()}
        assert scheduler.alive(), scheduler.log_tail()
        assert storage.alive(), storage.log_tail()


def _comm(pki: dict[str, Path], node: str | None, ca_dir: str = "ours") -> Ice.Communicator:
    props = {"IceSSL.CAs": str(pki["ours"] / tls.CA_CERT)}
    if node is not None:
        props["IceSSL.CertFile"] = str(pki[ca_dir] / f"{node}.pem")
        props["IceSSL.KeyFile"] = str(pki[ca_dir] / f"{node}-key.pem")
    return rpc.communicator((), props)


def _review() -> Any:
    return rpc.crawler().Review(
        id=f"r{next(_ids)}",
        productId="12",
        source="ecshop",
        user="u",
        content="good",
        score=5,
        createdAt="2024-05-01T12:00:00+08:00",
        fetchedAt="2024-05-01T12:00:00+08:00",
    )


def _lease_and_release(scheduler: Any) -> None:
    C = rpc.crawler()
    try:
        tasks = scheduler.getUsers("roles-test", 100)
    except C.NoWork:
        return
    scheduler.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks])


#: Every operation, as (daemon, call). A call may end in any declared error but NotAuthorized when allowed
#: (a made-up lease is LeaseLost, an empty queue NoWork): what matters is whether the role got through.
OPERATIONS: dict[str, tuple[str, Callable[[Any], object]]] = {
    "getUsers": ("scheduler", _lease_and_release),
    "getUser": ("scheduler", lambda s: s.getUser("roles-test")),
    "putUsers": ("scheduler", lambda s: s.putUsers([rpc.crawler().Report(taskId="user:weibo_pc:1", leaseToken="x")])),
    "putUser": ("scheduler", lambda s: s.putUser(rpc.crawler().Report(taskId="user:weibo_pc:1", leaseToken="x"))),
    "releaseUsers": (
        "scheduler",
        lambda s: s.releaseUsers([rpc.crawler().LeaseRef(taskId="user:weibo_pc:1", leaseToken="x")]),
    ),
    "addUsers(WeiboUser)": (
        "scheduler",
        lambda s: s.addUsers([f"weibo_mobile:{next(_ids)}"], rpc.crawler().TaskKind.WeiboUser),
    ),
    "addUsers(discovered products)": (
        "scheduler",
        lambda s: s.addUsers([f"ecshop:{next(_ids)}"], rpc.crawler().TaskKind.ProductReviews),
    ),
    "removeUsers": (
        "scheduler",
        lambda s: s.removeUsers([f"weibo_mobile:{next(_ids)}"], rpc.crawler().TaskKind.WeiboUser),
    ),
    "holdHost": ("scheduler", lambda s: s.holdHost("nowhere.example", 60.0, "roles-test")),
    "stats": ("scheduler", lambda s: s.stats()),
    "taskInfo": ("scheduler", lambda s: s.taskInfo("user:weibo_pc:1")),
    "listTasks": ("scheduler", lambda s: s.listTasks("", "", 10)),
    "writeReviews": ("storage", lambda s: s.writeReviews([_review()])),
    "writeWB": (
        "storage",
        lambda s: s.writeWB(
            [
                rpc.crawler().Post(
                    id=next(_ids), userId=1, text="t", createdAt="2024-05-01T12:00:00+08:00", source="weibo_pc"
                )
            ]
        ),
    ),
    "storage stats": ("storage", lambda s: s.stats()),
}

LEASE_OPS = {"getUsers", "getUser"}
REPORT_OPS = {"putUsers", "putUser", "releaseUsers"}
WRITE_OPS = {"writeReviews", "writeWB"}
STATUS_OPS = {"stats", "taskInfo", "listTasks", "storage stats"}
ALLOWED: dict[str, set[str]] = {
    # A client adds what its listing crawls discover with their reports (Report.discoveredIds), never with addUsers;
    # only an operator (admin) removes targets or holds hosts.
    "client": LEASE_OPS | REPORT_OPS | WRITE_OPS | STATUS_OPS,
    "admin": set(OPERATIONS),
    "reader": STATUS_OPS,
    "norole": set(),
    "revoked-admin": set(),
}


def _proxy(comm: Ice.Communicator, daemons: dict[str, str], daemon: str) -> Any:
    C = rpc.crawler()
    return (C.SchedulerPrx if daemon == "scheduler" else C.StoragePrx)(comm, daemons[daemon])


def _tasks(pki: dict[str, Path], daemons: dict[str, str]) -> int:
    with _comm(pki, "admin") as comm:
        return int(_proxy(comm, daemons, "scheduler").stats().tasks)


@pytest.mark.parametrize("role", list(ALLOWED))
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_each_role_calls_each_operation(
    role: str, operation: str, pki: dict[str, Path], daemons: dict[str, str]
) -> None:
    C = rpc.crawler()
    daemon, call = OPERATIONS[operation]
    before = _tasks(pki, daemons)
    with _comm(pki, role) as comm:
        proxy = _proxy(comm, daemons, daemon)
        if operation in ALLOWED[role]:
            try:
                call(proxy)
            except C.NotAuthorized as exc:
                pytest.fail(f"{role} refused {operation}: {exc.message}")
            except C.CrawlerError:
                pass  # a declared answer to the made-up arguments: the call got through
        else:
            with pytest.raises(C.NotAuthorized) as refused:
                call(proxy)
            assert refused.value.code == C.ErrorCode.Forbidden
            assert _tasks(pki, daemons) == before  # nothing was added


def test_account_cookies_go_to_clients_only(pki: dict[str, Path], daemons: dict[str, str]) -> None:
    C = rpc.crawler()
    target = f"weibo_pc:{900_000 + next(_ids)}"
    task_id = f"user:{target}"
    with _comm(pki, "admin") as admin_comm, _comm(pki, "client") as client_comm:
        admin = _proxy(admin_comm, daemons, "scheduler")
        client = _proxy(client_comm, daemons, "scheduler")
        assert admin.addUsers([target], C.TaskKind.WeiboUser) == 1
        for proxy, cookies in ((client, COOKIES), (admin, "")):
            tasks = proxy.getUsers("cookie-test", 1000)
            try:
                leased = [task for task in tasks if task.id == task_id]
                assert len(leased) == 1, [task.id for task in tasks]
                assert leased[0].account.id == "acct-1"
                assert leased[0].account.cookieBlob == cookies
            finally:
                proxy.releaseUsers([C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks])
        # Status never shows cookies, whoever asks.
        assert "secret" not in admin.stats().detailJson and "secret" not in admin.taskInfo(task_id)


def test_only_a_client_refreshes_an_accounts_cookies(pki: dict[str, Path], daemons: dict[str, str]) -> None:
    """A report may carry the account's cookies as the site refreshed them (``Report.accountCookies``): taken from a
    client, whose role is given cookies; ignored from an admin, which is never leased them."""
    C = rpc.crawler()

    def lease(proxy: Any, target: str) -> Any:
        """``target``'s task, leased by ``proxy`` (the other tasks it got are given back)."""
        assert admin.addUsers([target], C.TaskKind.WeiboUser) == 1
        tasks = proxy.getUsers("refresh-test", 1000)
        others = [C.LeaseRef(taskId=t.id, leaseToken=t.leaseToken) for t in tasks if t.id != f"user:{target}"]
        if others:
            proxy.releaseUsers(others)
        mine = [task for task in tasks if task.id == f"user:{target}"]
        assert len(mine) == 1, [task.id for task in tasks]
        return mine[0]

    refreshed = COOKIES.replace("SUB=secret-cookie", "SUB=refreshed-cookie")  # the file's cookies, a new value
    with _comm(pki, "admin") as admin_comm, _comm(pki, "client") as client_comm:
        admin = _proxy(admin_comm, daemons, "scheduler")
        client = _proxy(client_comm, daemons, "scheduler")
        planted = lease(admin, f"weibo_pc:{900_000 + next(_ids)}")
        admin.putUsers([C.Report(taskId=planted.id, leaseToken=planted.leaseToken, accountCookies="SUB=planted")])
        task = lease(client, f"weibo_pc:{900_000 + next(_ids)}")
        assert task.account.cookieBlob == COOKIES
        client.putUsers([C.Report(taskId=task.id, leaseToken=task.leaseToken, accountCookies=refreshed)])
        task = lease(client, f"weibo_pc:{900_000 + next(_ids)}")
        client.releaseUsers([C.LeaseRef(taskId=task.id, leaseToken=task.leaseToken)])
        assert task.account.cookieBlob == refreshed
        assert "refreshed" not in admin.stats().detailJson and "planted" not in admin.stats().detailJson


@pytest.mark.parametrize("daemon", ["scheduler", "storage"])
@pytest.mark.parametrize("who", ["no certificate", "certificate from another CA"])
def test_other_peers_fail_the_handshake(who: str, daemon: str, pki: dict[str, Path], daemons: dict[str, str]) -> None:
    before = _tasks(pki, daemons)
    comm = _comm(pki, None) if who == "no certificate" else _comm(pki, "admin", ca_dir="theirs")
    with comm, pytest.raises(REFUSED):
        OPERATIONS["addUsers(WeiboUser)" if daemon == "scheduler" else "writeReviews"][1](_proxy(comm, daemons, daemon))
    assert _tasks(pki, daemons) == before


def test_issue_writes_the_role(pki: dict[str, Path]) -> None:
    from icecrawler.security import role_of_certificate

    role, name, serial = role_of_certificate((pki["ours"] / "reader.pem").read_text())
    assert (role, name) == ("reader", "reader") and int(serial, 16) > 0
    assert role_of_certificate((pki["ours"] / "norole.pem").read_text())[0] == ""


def test_revocation_by_serial_as_openssl_prints_it(pki: dict[str, Path]) -> None:
    from icecrawler.security import Gate, role_of_certificate

    pem = (pki["ours"] / "admin.pem").read_text()
    serial = role_of_certificate(pem)[2]
    printed = subprocess.run(
        ["openssl", "x509", "-noout", "-serial", "-in", str(pki["ours"] / "admin.pem")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    assert printed.split("=", 1)[1].lower().lstrip("0") == serial.lstrip("0")
    assert Gate.from_setting(f"someone-else, {printed.split('=', 1)[1]}")._permissions_of(pem) == frozenset()
    assert "add" in Gate.from_setting("someone-else")._permissions_of(pem)

"""A small virtual network for the network-fault tests: one Linux network namespace per "machine", all joined
by a bridge that lives in its own hub namespace, so a test can cut one machine off (link down on its hub side)
exactly like pulling a cable. Nothing is created in the host's own network namespace.

Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2; ``NetLab.available()`` says why not, so the tests can
skip with that reason instead of failing obscurely.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

__all__ = ["Host", "NetLab"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


@dataclass(frozen=True)
class Host:
    """One namespace ("machine"): its name, its address on the lab network, its veth's hub-side name."""

    name: str
    netns: str
    address: str
    hub_link: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this machine's namespace (``ip netns exec`` execs, so the pid is the program's)."""
        return ["ip", "netns", "exec", self.netns, *argv]


class NetLab:
    """Namespaces on a private /24 (``10.213.<n>.0/24``), joined by a bridge in a hub namespace."""

    def __init__(self, subnet_octet: int | None = None) -> None:
        self.tag = secrets.token_hex(2)
        self.octet = subnet_octet if subnet_octet is not None else 200 + int(self.tag, 16) % 50
        self.hub = f"icx-{self.tag}-hub"
        self.hosts: dict[str, Host] = {}
        _ip("netns", "add", self.hub)
        try:
            _ip("-n", self.hub, "link", "set", "lo", "up")
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
        except subprocess.CalledProcessError:
            self.close()
            raise

    @staticmethod
    def available() -> str | None:
        """None if namespaces can be created here, else the reason they cannot."""
        if shutil.which("ip") is None:
            return "iproute2 (`ip`) is not installed"
        if os.geteuid() != 0:
            return "network namespaces need root (CAP_SYS_ADMIN/CAP_NET_ADMIN); not running as root"
        probe = f"icx-probe-{secrets.token_hex(3)}"
        result = _ip("netns", "add", probe, check=False)
        if result.returncode != 0:
            return f"`ip netns add` is not permitted here: {result.stderr.strip()}"
        _ip("netns", "del", probe, check=False)
        return None

    def add(self, name: str) -> Host:
        """A new machine: namespace, loopback up, a veth pair to the hub bridge, address 10.213.x.(n+1)."""
        index = len(self.hosts) + 1
        host = Host(
            name=name,
            netns=f"icx-{self.tag}-{name}",
            address=f"10.213.{self.octet}.{index}",
            hub_link=f"ih{self.tag}{index}",
        )
        inner = f"ie{self.tag}{index}"
        _ip("netns", "add", host.netns)
        self.hosts[name] = host
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("-n", self.hub, "link", "add", host.hub_link, "type", "veth", "peer", "name", inner)
        _ip("-n", self.hub, "link", "set", inner, "netns", host.netns)
        _ip("-n", self.hub, "link", "set", host.hub_link, "master", "br0")
        _ip("-n", self.hub, "link", "set", host.hub_link, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inner)
        _ip("-n", host.netns, "link", "set", inner, "up")
        return host

    def cut(self, name: str) -> None:
        """Pull the cable: the machine's hub-side link goes down, every packet to or from it is lost."""
        _ip("-n", self.hub, "link", "set", self.hosts[name].hub_link, "down")

    def heal(self, name: str) -> None:
        """Plug the cable back in."""
        _ip("-n", self.hub, "link", "set", self.hosts[name].hub_link, "up")

    def close(self) -> None:
        """Delete every namespace (their veths go with them). Callers stop the processes inside first."""
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
        _ip("netns", "del", self.hub, check=False)
        self.hosts.clear()

    def __enter__(self) -> NetLab:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

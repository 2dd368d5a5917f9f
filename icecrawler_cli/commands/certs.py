"""``icecrawler certs init|issue NODE``: a private CA and one certificate per node, for TLS between machines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icecrawler import tls
from icecrawler.settings import Settings
from icecrawler_cli.commands import BaseCommand


class Command(BaseCommand):
    summary = "create a private CA (init) and per-node TLS certificates (issue NODE)"
    description = (
        "Certificates for running every Ice endpoint over TLS (ssl endpoints) in a small deployment.\n\n"
        "  icecrawler certs init --dir certs            # CA: certs/ca.pem + certs/ca-key.pem (keep the key safe)\n"
        "  icecrawler certs issue scheduler --dir certs --dns sched.example --ip 10.0.0.5\n"
        "  icecrawler certs issue client-1 --dir certs --role client\n"
        "  icecrawler certs issue ops --dir certs --role admin      # seed tasks, everything but account cookies\n"
        "  icecrawler certs issue dashboard --dir certs --role reader  # status only\n\n"
        "--role is written into the certificate (as the subjectAltName URI icecrawler:role:ROLE); servers\n"
        "allow each operation by it. A certificate without a role (a daemon's own) may call nothing.\n\n"
        "For a node, the issue action writes NODE.pem, NODE-key.pem (mode 0600) and NODE-ssl.conf, an Ice\n"
        "property file that sets IceSSL.CAs/CertFile/KeyFile, VerifyPeer=2 (servers require client\n"
        "certificates) and IceSSL.TrustOnly.Server (the DNs a server accepts; --trust, default O=icecrawler).\n"
        "Copy NODE.pem, NODE-key.pem, ca.pem and NODE-ssl.conf to that node only. See docs/DEPLOY.md."
    )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=["init", "issue"], help="init: create the CA; issue: a node certificate")
        parser.add_argument("node", nargs="?", help="node name for issue (becomes CN= and a DNS subjectAltName)")
        parser.add_argument("--dir", default="certs", type=Path, help="certificate directory (default: ./certs)")
        parser.add_argument(
            "--days", type=int, default=None, help="validity in days (default: 3650 for the CA, 825 for a node)"
        )
        parser.add_argument(
            "--dns", action="append", default=[], metavar="NAME", help="extra DNS subjectAltName for issue (repeatable)"
        )
        parser.add_argument(
            "--ip", action="append", default=[], metavar="ADDR", help="IP subjectAltName for issue (repeatable)"
        )
        parser.add_argument(
            "--trust",
            action="append",
            default=[],
            metavar="DN",
            help="DN (or partial DN) this node accepts as a server, e.g. 'CN=client-1,O=icecrawler' "
            "(repeatable; default: O=icecrawler)",
        )
        parser.add_argument(
            "--install-dir",
            type=Path,
            default=None,
            metavar="DIR",
            help="where the files will live on the node, for NODE-ssl.conf's IceSSL.DefaultDir "
            "(issue; default: --dir), e.g. /etc/icecrawler/certs",
        )
        parser.add_argument(
            "--role",
            choices=list(tls.ROLES),
            default=None,
            help="issue: what the holder may call: client (lease, report, write, status, and account cookies with a "
            "lease), admin (lease, report, write, status, seed and remove targets, hold hosts; no account cookies), "
            "reader (status); default none",
        )
        parser.add_argument(
            "--ca-name", default="icecrawler CA", help="CN of the CA certificate (init; default: %(default)s)"
        )
        parser.add_argument("--force", action="store_true", help="overwrite an existing CA or node certificate")

    def run(self, args: argparse.Namespace, settings: Settings, ice_args: list[str]) -> int:
        directory: Path = args.dir
        if args.action == "init":
            if args.node:
                print("icecrawler certs: error: init takes no NODE", file=sys.stderr)
                return 2
            cert = tls.init_ca(
                directory, name=args.ca_name, days=3650 if args.days is None else args.days, force=args.force
            )
            print(
                f"CA certificate: {cert}\nCA key:         {directory / tls.CA_KEY} (mode 0600; keep it off the "
                f"nodes)\nNext: icecrawler certs issue NODE --dir {directory}"
            )
            return 0
        if not args.node:
            print("icecrawler certs: error: issue needs a NODE name", file=sys.stderr)
            return 2
        days = 825 if args.days is None else args.days
        files = tls.issue(
            directory,
            args.node,
            dns=args.dns,
            ips=args.ip,
            days=days,
            trust=args.trust,
            force=args.force,
            install_dir=args.install_dir,
            role=args.role,
        )
        print(
            f"certificate: {files.cert}  ({tls.node_dn(args.node)}, role {args.role or 'none'})\n"
            f"key:         {files.key} (mode 0600)\n"
            f"properties:  {files.properties}  (--Ice.Config={files.properties})"
        )
        return 0

"""Storage write throughput: ~1 KB posts from 4 concurrent writer processes through the real storage Ice server,
into the embedded store and into HBase, next to baselines from the same run that skip the server:

* ``hbase_raw``: one process, a plain happybase ``batch()`` put loop of the same rows (the Thrift/HBase ceiling
  for one client; shows what the server adds);
* ``embedded_raw``: one process, ``SqliteStore.put`` of the same rows (the SQLite ceiling).

Each run checks what it measured: after the writers finish, the server's stats must show every record stored
(or spooled and then drained), otherwise the run fails.

    icecrawler bench storage [--records 80000] [--batch 1000] [--writers 4] [--no-hbase]

HBase must be running (``icecrawler hbase start``) for the HBase rows; without it they are reported as skipped.
Writes docs/bench/storage.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import ROOT, write_figures

OUT = ROOT / "docs" / "bench" / "storage.json"

# ~1 KB of UTF-8 per record: 200 CJK chars of text (600 B), html around it, the rest of the fields.
_TEXT = ("今天去了西湖边散步，天气很好，湖面上有很多游船，柳树发芽了，春天真的来了。" * 6)[:200]


def make_posts(first_id: int, count: int) -> list[Any]:
    """``count`` distinct posts (ids from ``first_id``) over 500 users, as core objects."""
    from icecrawler.models import Post

    return [
        Post(
            id=first_id + i,
            user_id=1_000_000 + (first_id + i) % 500,
            user_name="测试用户",
            text=_TEXT,
            html=f"<div class='weibo-text'>{_TEXT[:60]}</div>",
            created_at=f"2024-05-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+08:00",
            reposts=i % 7,
            comments=i % 5,
            likes=i % 11,
            pinned=False,
            retweeted_id=0,
            pictures=["https://wx1.sinaimg.cn/large/0000000000000000.jpg"],
            permalink=f"https://weibo.com/{1_000_000 + (first_id + i) % 500}/{first_id + i}",
            fetched_at="2024-05-01T12:30:00+08:00",
            source="weibo_mobile",
        )
        for i in range(count)
    ]


def _writer(endpoint: str, first_id: int, count: int, batch: int, ready: Any, start: Any, results: Any) -> None:
    """One writer process: build its batches first, then send them back to back after the start signal."""
    from icecrawler import rpc

    comm = rpc.communicator()
    try:
        proxy = rpc.crawler().StoragePrx(comm, endpoint).ice_invocationTimeout(120_000)
        posts = [rpc.post_to_slice(post) for post in make_posts(first_id, count)]
        batches = [posts[i : i + batch] for i in range(0, len(posts), batch)]
        proxy.ice_ping()
        ready.put(first_id)
        start.wait()
        began = time.perf_counter()
        stored = spooled = 0
        for chunk in batches:
            ack = proxy.writeWB(chunk)
            stored += ack.stored
            spooled += ack.spooled
        results.put((time.perf_counter() - began, stored, spooled))
    finally:
        comm.destroy()


def through_server(
    backend: str, records: int, batch: int, writers: int, tmp: Path, extra: dict[str, str]
) -> dict[str, float]:
    """Start a storage server on ``backend``; ``writers`` processes write ``records`` posts in total."""
    from icecrawler import rpc
    from icecrawler.processes import ProcessGroup, cpu_seconds, free_port
    from icecrawler_local.launcher import Cluster

    port = free_port()
    settings = {
        "storage.backend": backend,
        "storage.embedded.path": str(tmp / f"{backend}.sqlite3"),
        "storage.spool_dir": str(tmp / f"{backend}-spool"),
        "storage.write_timeout_s": "30",
        "storage.hbase.timeout_s": "60",
        "log.level": "WARNING",
        **extra,
    }
    endpoint = f"storage:tcp -h 127.0.0.1 -p {port}"
    context = multiprocessing.get_context("spawn")
    with ProcessGroup(tmp / "logs") as group:
        server = Cluster(tmp / backend, group).start_server(
            "storage", "127.0.0.1", port, settings=settings, timeout_s=30
        )
        warm = make_posts(10**15, batch)  # creates HBase tables / SQLite pages outside the timed part
        comm = rpc.communicator()
        try:
            proxy = rpc.crawler().StoragePrx(comm, endpoint).ice_invocationTimeout(120_000)
            proxy.writeWB([rpc.post_to_slice(post) for post in warm])
            ready, start, results = context.Queue(), context.Event(), context.Queue()
            share = records // writers
            procs = [
                context.Process(target=_writer, args=(endpoint, 1 + w * share, share, batch, ready, start, results))
                for w in range(writers)
            ]
            for proc in procs:
                proc.start()
            for _ in procs:  # every writer has built its batches and connected: only sending is timed
                ready.get(timeout=300)
            cpu_before = cpu_seconds(server.pid)
            began = time.perf_counter()
            start.set()
            outcomes = [results.get(timeout=600) for _ in procs]
            wall = time.perf_counter() - began
            server_cpu_s = cpu_seconds(server.pid) - cpu_before
            for proc in procs:
                proc.join(timeout=30)
            stored = sum(outcome[1] for outcome in outcomes)
            spooled = sum(outcome[2] for outcome in outcomes)
            # every acknowledged record must be in the backend (spool drained; counts come from the backend)
            expected = share * writers + len(warm)
            deadline = time.monotonic() + 300
            stats = proxy.stats()
            while (stats.spoolDepth or stats.posts != expected) and time.monotonic() < deadline:
                time.sleep(0.5)
                stats = proxy.stats()
            if stats.posts != expected or stats.spoolDepth:
                raise RuntimeError(
                    f"{backend}: expected {expected} posts, stats say "
                    f"{stats.posts} stored and {stats.spoolDepth} still spooled"
                )
        finally:
            comm.destroy()
    return {
        "records": share * writers,
        "seconds": wall,
        "records_per_s": share * writers / wall,
        "stored_directly": stored,
        "spooled": spooled,
        "server_cpu_us_per_record": 1e6 * server_cpu_s / (share * writers),
    }


def raw_sqlite(records: int, batch: int, tmp: Path) -> dict[str, float]:
    """Baseline: the same rows straight into ``SqliteStore`` from this one process, no server."""
    from storage_server import schema
    from storage_server.stores import SqliteStore

    store = SqliteStore(tmp / "raw.sqlite3")
    rows = [schema.post_row(post) for post in make_posts(1, records)]
    began = time.perf_counter()
    for i in range(0, len(rows), batch):
        store.put(schema.WEIBO, rows[i : i + batch])
    wall = time.perf_counter() - began
    store.close()
    return {"records": records, "seconds": wall, "records_per_s": records / wall}


def raw_happybase(records: int, batch: int, port: int) -> dict[str, float]:
    """Baseline: a plain happybase batch-put loop of the same rows from this one process."""
    import happybase

    from storage_server import schema
    from storage_server.hbase_store import FAMILY, encode_columns

    prefix = "bench" + uuid.uuid4().hex[:8]
    connection = happybase.Connection("127.0.0.1", port, table_prefix=prefix, timeout=120_000)
    try:
        connection.create_table("weibo", {FAMILY: {"max_versions": 1}})
        table = connection.table("weibo")
        cells = [(row.key, encode_columns(row.columns)) for row in map(schema.post_row, make_posts(1, records))]
        with table.batch() as warm:
            warm.put(b"\x00warm", encode_columns({"id": 0}))
        began = time.perf_counter()
        for i in range(0, len(cells), batch):
            with table.batch() as put:
                for key, columns in cells[i : i + batch]:
                    put.put(key, columns)
        wall = time.perf_counter() - began
        connection.delete_table("weibo", disable=True)
    finally:
        connection.close()
    return {"records": records, "seconds": wall, "records_per_s": records / wall}


def _hbase_port() -> int | None:
    from icecrawler.settings import Settings
    from icecrawler_local.hbase_local import LocalHBase

    hbase = LocalHBase.from_settings(Settings())
    return hbase.thrift_port if hbase.answering() else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="icecrawler bench storage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=80_000, help="embedded: records in total (all writers)")
    parser.add_argument("--hbase-records", type=int, default=40_000, help="HBase: records in total")
    parser.add_argument("--batch", type=int, default=1000, help="records per writeWB call / per raw put")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writer processes")
    parser.add_argument("--no-hbase", action="store_true", help="embedded only")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)

    from storage_server import schema

    load_before = round(os.getloadavg()[0], 2)
    record_bytes = len(schema.encode_rows(schema.WEIBO, [schema.post_row(make_posts(1, 1)[0])]))
    rows: list[tuple[str, dict[str, float] | None, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmpdir:
        tmp = Path(tmpdir)
        embedded = through_server("embedded", args.records, args.batch, args.writers, tmp, {})
        rows.append(("embedded, via storage server", embedded, f"{args.writers} writer processes"))
        sqlite_raw = raw_sqlite(args.records, args.batch, tmp)
        rows.append(("embedded raw SqliteStore.put (baseline)", sqlite_raw, "1 process, no server"))
        port = None if args.no_hbase else _hbase_port()
        hbase = hbase_raw = None
        if port is not None:
            prefix = "bench" + uuid.uuid4().hex[:8]
            hbase = through_server(
                "hbase",
                args.hbase_records,
                args.batch,
                args.writers,
                tmp,
                {"storage.hbase.port": str(port), "storage.hbase.table_prefix": prefix},
            )
            rows.append(("HBase, via storage server", hbase, f"{args.writers} writer processes"))
            hbase_raw = raw_happybase(args.hbase_records, args.batch, port)
            rows.append(("HBase raw happybase batch put (baseline)", hbase_raw, "1 process, no server"))
            _drop_tables(port, prefix)
        else:
            rows.append(("HBase", None, "skipped: HBase not running (icecrawler hbase start)"))

    print(f"storage write throughput: ~{record_bytes} B/record (as spooled JSON), batch {args.batch}")
    print(f"{'path':44} {'records':>8} {'seconds':>8} {'records/s':>10}  note")
    for name, result, note in rows:
        if result is None:
            print(f"{name:44} {'-':>8} {'-':>8} {'-':>10}  {note}")
        else:
            print(
                f"{name:44} {result['records']:>8.0f} {result['seconds']:>8.2f} {result['records_per_s']:>10,.0f}"
                f"  {note}"
            )
    summary: dict[str, Any] = {
        "record_bytes": record_bytes,
        "batch_records": args.batch,
        "writer_processes": args.writers,
        "embedded_records_per_s": round(embedded["records_per_s"]),
        "embedded_raw_sqlite_records_per_s": round(sqlite_raw["records_per_s"]),
        "embedded_records": embedded["records"],
        "embedded_server_cpu_us_per_record": round(embedded["server_cpu_us_per_record"], 1),
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }
    print(
        f"storage server CPU per record (embedded): {embedded['server_cpu_us_per_record']:.1f} us; "
        f"load average {load_before} -> {summary['load_avg_1m_after']}"
    )
    if hbase is not None and hbase_raw is not None:
        summary.update(
            {
                "hbase_records_per_s": round(hbase["records_per_s"]),
                "hbase_raw_happybase_records_per_s": round(hbase_raw["records_per_s"]),
                "hbase_records": hbase["records"],
                "hbase_spooled_records": hbase["spooled"],
            }
        )
    elif OUT.exists():  # keep the last HBase figures, marked as such, when this run skipped HBase
        earlier = json.loads(OUT.read_text(encoding="utf-8"))
        kept = {key: value for key, value in earlier.items() if key.startswith("hbase_")}
        if kept:
            summary.update(kept)
            summary["hbase_from_an_earlier_run"] = True
    if not args.no_write:
        write_figures(OUT, summary)
    return 0


def _drop_tables(port: int, prefix: str) -> None:
    import happybase

    connection = happybase.Connection("127.0.0.1", port, table_prefix=prefix, timeout=120_000)
    try:
        for table in ("weibo", "review"):
            if table.encode() in connection.tables():
                connection.delete_table(table, disable=True)
    finally:
        connection.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

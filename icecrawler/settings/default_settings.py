"""Every default setting of icecrawler, in one place (Scrapy's default_settings, StormCrawler's crawler-default).

Keys are dotted and grouped by the component that reads them. Code never writes a second literal default:
it reads the key from a ``Settings`` object. Users override keys in ``icecrawler.toml`` (a TOML table per
prefix) or with ``--set key=value`` on any subcommand. Times are seconds unless the name says otherwise.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    # --- client: the crawler worker daemon -------------------------------------------------------------
    # Concurrent fetch workers inside one client process.
    "client.workers": 4,
    # Tasks leased per getUsers call (1 uses getUser).
    "client.batch": 4,
    # Most result pages crawled per task per visit (the incremental stop usually ends sooner).
    "client.max_pages": 5,
    # Per-request timeout (connect and read).
    "client.timeout_s": 10.0,
    # Retries of one request on timeouts/connection errors/5xx, with jittered exponential backoff.
    "client.retries": 2,
    "client.backoff_s": 0.5,
    # Responses larger than this (decoded: a compressed body counts inflated) are cut off and classified as TooLarge.
    "client.max_body_bytes": 8_000_000,
    # How long an idle client waits before asking again when the scheduler has no work (upper bound).
    "client.idle_sleep_s": 1.0,
    # Records kept in memory while storage is unreachable, before the client stops leasing.
    "client.buffer_records": 100_000,
    # HTTP proxy for every fetch ("http://host:3128"); empty = direct. HTTP(S)_PROXY in the environment is ignored.
    "client.proxy_url": "",
    # User-Agent sent on every request; empty = each source's own (what the site's web client sends, see
    # docs/SOURCES.md; icecrawler/<version> for sources without one). sources.<name>.headers can still override it.
    "client.user_agent": "",
    # Upper bound of every backoff (scheduler/storage unreachable, retried fetches).
    "client.max_backoff_s": 10.0,
    # How often the client logs progress (tasks, items stored, per-outcome counts).
    "client.progress_log_s": 30.0,
    # Most reports per putUsers call (and discovered ids per addUsers call).
    "client.report_batch": 50,
    # On SIGTERM/SIGINT: how long in-flight tasks may finish and be reported before leases are given back; a call
    # to a server that does not answer is abandoned 3 s later, so a stop takes at most about this plus 10 s.
    "client.shutdown_grace_s": 20.0,
    # Longest time one fetch may take in total, headers and body (a server that drips bytes is cut off as Timeout).
    "client.total_timeout_s": 30.0,
    # --- clock: simulated time shared by every process of a run (icecrawler.clock) --------------------------
    # Wall-clock epoch that simulated time starts from; 0 = the process start (for a sandbox with a truth file
    # that records a run, that run's origin). Give every process of one run the same value (the demo and the
    # tests do), and give it again to a process started again mid-run: a scheduler or client with clock.speed
    # other than 1 refuses to start with 0.
    "clock.origin": 0.0,
    # Simulated seconds per wall second (60 = one minute per second). Periods, item times and relative dates
    # ("5分钟前") are all in simulated time.
    "clock.speed": 1.0,
    # --- hbase: the local standalone HBase runner (deploy/hbase) -------------------------------------------
    # Jars, config, data, logs and pid files of the local HBase.
    "hbase.dir": "var/hbase",
    # Heap of the HBase JVM (master + region server + ZooKeeper); Thrift gets a quarter (at least 256).
    "hbase.heap_mb": 1024,
    # The java binary; empty = JDK 17 from JAVA_HOME or /usr/lib/jvm (HBase 2.6 does not run on JDK 18+).
    "hbase.java": "",
    # Ports of the local HBase's master, region server, Thrift server and ZooKeeper (loopback only).
    "hbase.master_port": 16000,
    "hbase.regionserver_port": 16020,
    # `icecrawler hbase start` gives up (with the log tail) if Thrift does not answer a table call by then.
    "hbase.start_timeout_s": 240.0,
    "hbase.thrift_port": 9090,
    "hbase.zookeeper_port": 2181,
    # --- log ----------------------------------------------------------------------------------------------
    # One JSON object per log line instead of text (--log-json), and the least level logged: DEBUG, INFO, WARNING
    # or ERROR (--log-level). Every command logs to stderr.
    "log.json": False,
    "log.level": "INFO",
    # --- metrics: each daemon's Prometheus /metrics endpoint (icecrawler/metrics.py, docs/DEPLOY.md) -----------
    # Address the endpoint binds; set the host's own address (or 0.0.0.0) so a Prometheus elsewhere can scrape.
    # port 0 turns a role's endpoint off. A taken port is not fatal: the next ports up to port_span are tried
    # (one per client process on a machine); if all are taken the daemon runs without /metrics (logged).
    # Scheduler shard K listens at metrics.scheduler.port + K.
    "metrics.client.address": "127.0.0.1",
    "metrics.client.port": 9430,
    "metrics.client.port_span": 16,
    "metrics.scheduler.address": "127.0.0.1",
    "metrics.scheduler.port": 9410,
    "metrics.scheduler.port_span": 1,
    "metrics.storage.address": "127.0.0.1",
    "metrics.storage.port": 9420,
    "metrics.storage.port_span": 4,
    # --- sandbox: the local stand-in sites (sandbox/, docs/SANDBOX.md) ---------------------------------------
    # Address the sandbox's sites listen on (`icecrawler sandbox --host`).
    "sandbox.host": "127.0.0.1",
    # Added to every site request (the client benchmark uses 100, the scale benchmark 50).
    "sandbox.latency_ms": 0,
    # A "hang" or "hold" misbehaviour never lasts longer than this.
    "sandbox.max_hang_s": 60.0,
    # The port every site shares (sources.*.base_url point here).
    "sandbox.port": 8800,
    # Scenario file (TOML or JSON); empty = the built-in demo scenario.
    "sandbox.scenario": "",
    # Overrides the scenario's seed when >= 0.
    "sandbox.seed": -1,
    # JSONL file the ground truth is appended to; empty = none.
    "sandbox.truth_file": "",
    # Lifetime of a visitor session minted by the sandbox's passport (simulated seconds); then HTTP 432.
    "sandbox.visitor_ttl_s": 86400.0,
    # --- scheduler: the task master ------------------------------------------------------------------------
    # Accounts: TOML files of [[account]] id/cookies, readable by the scheduler only.
    "scheduler.accounts_dir": "",
    # Requests one account may make per minute, across all clients (a lease counts one, a report adds the
    # rest of its fetches).
    "scheduler.account_budget_per_min": 60,
    # How long a frozen account stays frozen after a ban/AccountFrozen report (longer if the site's Retry-After is,
    # up to max_period_s).
    "scheduler.account_freeze_s": 3600.0,
    # Comma-separated sources whose tasks are leased only with an account (e.g. "weibo_pc,weibo_mobile" for
    # the real sites), beside those an account's own `sources` names; with no usable account those tasks wait,
    # they are never dropped.
    "scheduler.account_sources": "",
    # Visitor sessions (sources.<name>.visitor_url): the least time between two mints for one source, so that
    # many clients reporting the same expired session renew it once.
    "scheduler.visitor_renew_s": 30.0,
    # Failed attempts before exponential backoff applies.
    "scheduler.backoff_after_attempts": 3,
    # Most tasks/reports/ids in one getUsers/putUsers/releaseUsers/addUsers call; larger batches are
    # rejected with InvalidArgument(BatchTooLarge), empty ones with InvalidArgument(EmptyBatch).
    "scheduler.batch_limit": 1000,
    # Hot backups of the queue database, taken while the scheduler serves: a directory ("" = none), how often
    # (wall-clock seconds) and how many to keep. Each is a complete database directory a scheduler can start on,
    # <backup_dir>/scheduler-<UTC time> (scheduler-shard<K>-... for a shard); docs/DEPLOY.md, "Backups".
    "scheduler.backup_dir": "",
    "scheduler.backup_interval_s": 86400.0,
    "scheduler.backup_keep": 7,
    # Seconds between checkpoints of the Berkeley DB environment (bounds recovery time and log size).
    "scheduler.checkpoint_interval_s": 30.0,
    # Berkeley DB environment directory.
    "scheduler.db_dir": "var/scheduler",
    # How long the completion log ("done" table) keeps entries (simulated seconds): one of about 275 bytes per lease
    # ended, so 170 MB per lease a second at 7 days (docs/DEPLOY.md, "Disk and memory over months").
    "scheduler.done_retention_s": 604800.0,
    # fsync the log on every commit (one commit per call, so a batch costs one fsync). false: commits reach
    # the OS but are not synced (DB_TXN_WRITE_NOSYNC): they survive a scheduler crash, not a machine crash.
    "scheduler.durable_commits": True,
    # Successful crawls kept per task for `status --task` (time, period, distance, new items).
    "scheduler.history_len": 20,
    # Start on a queue database whose logs are missing or that fails its check by salvaging it (`scheduler
    # --recover`): the damaged directory is moved aside and every readable record copied into a new one.
    "scheduler.recover": False,
    # How long a ban report blocks a host when the client gave no Retry-After (a Retry-After blocks it that long, at
    # most the longer of this and max_period_s).
    "scheduler.host_block_s": 300.0,
    # Task records kept decoded in memory, the most recently changed ones (about 3 KB each): a task leased or
    # reported while its record is cached reads no B-tree. 0 = read every record from the store.
    "scheduler.record_cache": 50000,
    # Minimum spacing per host across all clients (wall seconds). When > 0 a host has at most one task in
    # flight, and its next task is leased no sooner than this after the previous one was leased and ended.
    "scheduler.host_spacing_s": 0.0,
    # Shards: run the scheduler as `shards` processes, each with its own db_dir and endpoint, to use more than
    # one core. Shard `shard` (0-based) holds the tasks of the hosts with crc32(host) % shards == shard, so
    # politeness per host stays in one process; addUsers of another shard's ids fails with WrongShard. A
    # database remembers its shard and count. Clients list every shard, in order, in the Scheduler.Proxies Ice
    # property (docs/DEPLOY.md).
    "scheduler.shards": 1,
    "scheduler.shard": 0,
    # Lease duration: a task not reported by then returns to pending.
    "scheduler.lease_s": 120.0,
    # How often the reaper returns expired leases to pending and prunes the completion log (wall seconds).
    "scheduler.maintenance_interval_s": 1.0,
    # Period bounds and first period for new tasks (under a scheduler.fetch_budget_per_s too small for
    # max_period_s, the rate policy's longest period stretches past it: docs/REVISIT.md, "The default policy").
    "scheduler.max_period_s": 86400.0,
    "scheduler.min_period_s": 60.0,
    "scheduler.initial_period_s": 600.0,
    # Re-crawl policy: "rate" (our own: exact new-item counts, rate estimate, square-root rule; it beats the
    # others at equal fetch budgets in docs/REVISIT.md), "shhd" (the paper), "nutch", "cho", "sart", "fixed".
    "scheduler.policy": "rate",
    # Global fetch budget of the "rate" policy: fetches per (simulated) second over all tasks, spread by the
    # square-root rule over each task's estimated item rate (docs/REVISIT.md); while the tasks keep one daily clock
    # (as product-review streams do) the daily anchor is off. 0 = no global budget: each task gets
    # sqrt(rate_reference_period_s / rate).
    "scheduler.fetch_budget_per_s": 0.0,
    # "rate" policy without a global budget: a target publishing one item per this period is crawled once per
    # this period; others by the square-root rule (100x slower -> 10x longer). Passed to shhd make_policy.
    "scheduler.rate_reference_period_s": 600.0,
    # "rate" policy: correct each task's rate estimate by how the estimates of that size came true over all tasks
    # (quiet tasks wake up, busy ones calm down; docs/REVISIT.md, "#21, third round"); a task estimated below
    # 0.1 item a day gets what such tasks went on to publish ("twelfth round"). It is learnt from the reports and
    # kept in the scheduler's database, so a restart goes on from what it had learnt. false = each task's own
    # estimate only.
    "scheduler.rate_calibration": True,
    # (Accelerated time: the shared clock.speed / clock.origin keys apply to periods and due times.)
    # --- security: who may call the daemons (docs/DEPLOY.md, "Security") -----------------------------------
    # Let a daemon listen on a plain (non-TLS) endpoint of a non-loopback interface. Anyone who reaches such an
    # endpoint may call every operation, so without this a daemon refuses to start with one (with it, it warns).
    "security.allow_insecure": False,
    # Certificates of our CA that the servants refuse anyway: comma-separated serial numbers (hex, as
    # `openssl x509 -noout -serial` prints them) or common names.
    "security.revoked": "",
    # --- sources: not listed here. Each source declares its own sources.<name>.* settings and their defaults
    # next to its parser (SourceSpec: base_url, headers, username/password for a form login, visitor_url for
    # visitors, and its options, such as sources.jd.endpoint); `icecrawler settings` lists them with the rest.
    # headers: a JSON object ({"Name": "value", "Removed": null}) or "Name: value" lines; empty = what the
    # site's own web client sends. docs/SOURCES.md has each source's endpoints, headers and sessions.
    # --- storage: the record store ---------------------------------------------------------------------------
    # Backups of the storage server's own files while it serves (the spool, and the embedded store when it is
    # the backend; HBase has its own snapshots): a directory ("" = none), how often, how many to keep. Each is
    # <backup_dir>/<backup_name>-<UTC time> with a checked copy of each file; docs/DEPLOY.md, "Backups".
    "storage.backup_dir": "",
    "storage.backup_interval_s": 86400.0,
    "storage.backup_keep": 7,
    # What the backups' names start with (<backup_dir>/<backup_name>-<UTC time>): give each storage server that
    # shares a backup_dir its own (the IceGrid descriptor uses the server id), or they prune and overwrite each other's.
    "storage.backup_name": "storage",
    # "embedded" (SQLite, no server) or "hbase" (through its Thrift server).
    "storage.backend": "embedded",
    # Most records in one writeWB/writeReviews call.
    "storage.batch_limit": 5000,
    # The embedded backend's SQLite file.
    "storage.embedded.path": "var/storage/icecrawler.sqlite3",
    # The HBase backend: its Thrift server, the connections to it (pool_size is also the number of threads that
    # write to either backend), and a prefix of its table names ("x" = tables x_weibo and x_review; empty = none).
    "storage.hbase.host": "127.0.0.1",
    "storage.hbase.port": 9090,
    "storage.hbase.pool_size": 4,
    "storage.hbase.table_prefix": "",
    # Socket timeout of one Thrift call (a put of one batch, one scanner page) before the backend counts as down.
    "storage.hbase.timeout_s": 10.0,
    # Longest text accepted in one record field; longer records are rejected.
    "storage.max_text_chars": 100_000,
    # Start on a damaged, emptied or vanished store or spool (`storage --recover`): a damaged file is moved
    # aside and its readable rows copied into a new one; a vanished store is begun anew, empty.
    "storage.recover": False,
    # Durable spool used while the backend is down or slow.
    "storage.spool_dir": "var/storage/spool",
    # A write waits at most this long for the backend before it is spooled instead.
    "storage.write_timeout_s": 2.0,
}

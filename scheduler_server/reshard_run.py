"""Where ``icecrawler reshard`` builds each new shard's database and how it names the run that made it, shared by
the command (which finishes a run stopped while it renamed) and the scheduler's start (which refuses to begin an
empty database where such a run's copy still waits to be renamed). Only ``json`` and paths: the command imports
it without Berkeley DB."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["PARTIAL_SUFFIX", "RUN_FILE", "partial_of", "run_of", "unfinished_reshard"]

#: Where a new shard's database is built before it is renamed into place.
PARTIAL_SUFFIX = ".partial"
#: Written into each new shard's database before any is renamed into place: which run made it, which shard of how
#: many, from which databases. A run stopped while it renamed is finished by the next run with the same paths.
RUN_FILE = "reshard.json"


def partial_of(target: Path) -> Path:
    """The folder a reshard builds ``target`` (a ``--to`` path) in."""
    return target.with_name(target.name + PARTIAL_SUFFIX)


def run_of(path: Path) -> dict[str, object] | None:
    """The run file of the database in ``path``, None when there is none (or it does not read)."""
    try:
        run = json.loads((path / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def unfinished_reshard(db_dir: Path) -> str:
    """Why a scheduler must not begin a new database in ``db_dir`` (which holds none), or "": a reshard's copy for
    it waits beside it, not renamed into place (the reshard was killed, or stopped, before it finished). An empty
    database there would serve none of that copy's tasks, and the reshard could no longer be finished."""
    partial = partial_of(db_dir)
    if not partial.is_dir() or not any(partial.iterdir()):
        return ""
    run = run_of(partial) or {}
    which = f" (shard {run['shard']} of {run['shards']})" if "shard" in run and "shards" in run else ""
    return (
        f"the scheduler database in {db_dir} is missing, but {partial} holds the copy an icecrawler reshard made for "
        f"it{which} and never renamed into place (the reshard was stopped): run the same icecrawler reshard command "
        "again (the same --from and --to) to finish it before starting the new shards. Not beginning a new, empty "
        "database, which would serve none of that copy's tasks"
    )

"""``icecrawler remove``: stop crawling targets (removeUsers). The ids, --kind, --file and --listing read as
``icecrawler seed`` reads them; only the scheduler call differs."""

from __future__ import annotations

from icecrawler_cli.commands import seed


class Command(seed.Command):
    summary = "remove targets from the scheduler: they are crawled no more"
    description = (
        "Remove crawl targets, given as icecrawler seed takes them: <source>:<target> ids (the kind follows from "
        "the source unless --kind is given) or task ids (<kind>:<source>:<target>), --file (- for standard "
        "input), --listing SOURCE:CATEGORY. For example, every target whose last crawl found it gone: "
        "icecrawler tasks --outcome NotFound --ids | icecrawler remove --file -. A removed target is crawled no "
        "more, whether it was waiting or being crawled (that crawl's report is refused). "
        "Unknown ids are ignored. What was stored is kept (icecrawler export reads it). A product found by a "
        "listing comes back at the listing's next crawl: remove the listing too. Needs the admin role over TLS."
    )
    call = "remove_targets"
    counted = "removed"
    listing_help = "remove a listing task (repeatable)"

"""``python -m sandbox [options]`` is ``icecrawler sandbox [options]``."""

from __future__ import annotations

import sys

from icecrawler.cli import main

if __name__ == "__main__":
    sys.exit(main(["sandbox", *sys.argv[1:]]))

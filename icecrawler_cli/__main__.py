"""``python -m icecrawler``."""

import sys

from icecrawler_cli.cli import main

sys.exit(main())

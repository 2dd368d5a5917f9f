"""``python -m icecrawler``."""

import sys

from icecrawler.cli import main

sys.exit(main())

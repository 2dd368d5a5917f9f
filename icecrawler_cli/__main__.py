"""``python -m icecrawler_cli`` (what ``icecrawler.processes.icecrawler_argv`` runs)."""

import sys

from icecrawler_cli.cli import main

sys.exit(main())

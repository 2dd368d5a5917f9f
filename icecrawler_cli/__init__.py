"""The ``icecrawler`` command line (the roof): ``cli.main`` parses the global options and loads only the
subcommand it dispatches to (``commands/``), so starting a daemon does not import every role."""

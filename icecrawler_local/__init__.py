"""Running the whole crawler on one machine (source checkout only, like ``sandbox`` and ``bench``): the local
launcher (``stack``), the demo application (``demo``) and the local HBase + Thrift runner (``hbase_local``).

It sits above the roles and the sandbox and below the CLI (``pyproject.toml``'s import-linter layers); the wheel
leaves it out, and the commands that need it say so (``icecrawler.optional``)."""

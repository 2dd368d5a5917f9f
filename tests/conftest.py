"""Test-session set-up shared by every package of the suite."""

from icecrawler.optional import use_source_checkout

# sandbox/ and bench/ are not installed packages (not even by an editable install): put the checkout on sys.path
# and on PYTHONPATH, so that tests and the processes they start (icecrawler sandbox, -m bench.*) import them.
use_source_checkout()

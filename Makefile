# The two commands of the README:
#   make demo   set up everything, then run the demo crawl on the embedded store
#   make test   set up everything, start the local HBase, lint, type-check and run the test suite
# And the developer's fast loop (CONTRIBUTING.md):
#   make check  lint, format check, types and the unit tests that need no external service
VENV := .venv
BIN := $(VENV)/bin

# The tests `make check` runs: no HBase, no JDK, no multi-process end-to-end runs, no wheel build (2 581 tests on
# 2026-12-08, seventeenth session; 2 770 in all with `make test`). On the 2-vCPU development VM, idle (load average under 1), the whole `make check`
# (set-up check, ruff, the format check, lint-imports, a warm mypy, pytest) took 4 min 2 s of wall time when it ran
# 1 741 tests, pytest 4 min of it (the client tests 72 s, the scheduler's 67 s, foundation 52 s). A busy machine takes
# more: the 1 886 took 6 min 4 s of pytest while a kill -9 harness and other helpers ran.
UNIT_TESTS := not (hbase or e2e or slow or build)

.PHONY: demo test check setup setup-dev constraints lint typecheck pytest hbase-start hbase-stop bench clean

setup:
	@scripts/bootstrap.sh

# The same set-up without the system packages only the service tests need (IceGrid, JDK, Maven, iproute2).
setup-dev:
	@ICECRAWLER_SETUP=dev scripts/bootstrap.sh

# Move .venv to the newest releases pyproject.toml allows and pin them in scripts/constraints.txt (then run
# `make check` and `make test` before committing the file).
constraints: setup
	scripts/refresh_constraints.sh

demo: setup
	$(BIN)/icecrawler demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

hbase-start: setup
	$(BIN)/icecrawler hbase start

hbase-stop:
	-$(BIN)/icecrawler hbase stop

pytest: setup
	$(BIN)/pytest

check: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/pytest -q -m "$(UNIT_TESTS)"

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/icecrawler hbase start
	ICECRAWLER_HBASE_RUNNING=1 $(BIN)/pytest; status=$$?; $(BIN)/icecrawler hbase stop; exit $$status

bench: setup
	$(BIN)/icecrawler bench all

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache

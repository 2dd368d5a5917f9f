# The two commands of the README:
#   make demo   set up everything, then run the demo crawl on the embedded store
#   make test   set up everything, start the local HBase, lint, type-check and run the test suite
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test setup lint typecheck pytest hbase-start hbase-stop bench clean

setup:
	@scripts/bootstrap.sh

demo: setup
	$(BIN)/icecrawler demo

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy

hbase-start: setup
	$(BIN)/icecrawler hbase start

hbase-stop:
	-$(BIN)/icecrawler hbase stop

pytest: setup
	$(BIN)/pytest

test: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/icecrawler hbase start
	ICECRAWLER_HBASE_RUNNING=1 $(BIN)/pytest; status=$$?; $(BIN)/icecrawler hbase stop; exit $$status

bench: setup
	$(BIN)/icecrawler bench all

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache

# Two entry points (see README.md): `make demo` runs nbrecall on the bundled sample, `make test` runs the suite.
# Each creates its own virtualenv in .venv and installs what it needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO := build/demo

.PHONY: venv test lint demo clean

$(BIN)/nbrecall: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/nbrecall

venv: $(BIN)/nbrecall

lint: venv
	$(BIN)/ruff check src tests bench

test: venv lint
	$(BIN)/pytest

demo: venv
	$(BIN)/nbrecall convert samples/archive -o $(DEMO)/converted
	$(BIN)/nbrecall index samples/archive --config samples/nbrecall.toml --index $(DEMO)/index
	$(BIN)/nbrecall status --index $(DEMO)/index
	$(BIN)/nbrecall search "what ballast volume did we use aft for the 130 m PSV" --config samples/nbrecall.toml --index $(DEMO)/index -k 3
	$(BIN)/nbrecall search "KeyError pile_diameter" --config samples/nbrecall.toml --index $(DEMO)/index -k 2
	$(BIN)/nbrecall search "free surface effect" --config samples/nbrecall.toml --index $(DEMO)/index -k 2 --json

clean:
	rm -rf $(VENV) build .pytest_cache

# Two entry points (see README.md): `make demo` runs nbrecall on the bundled sample, `make test` runs the suite.
# Each creates its own virtualenv in .venv and installs what it needs.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO := build/demo

.PHONY: venv lock system-deps pyodide-runner test test-fast lint typecheck demo clean

$(BIN)/nbrecall: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(BIN)/nbrecall

venv: $(BIN)/nbrecall

# constraints.txt again from the newest releases pyproject.toml admits, in a throw-away virtualenv; then `make test`
lock:
	rm -rf build/lock && $(PYTHON) -m venv build/lock
	build/lock/bin/pip install --quiet --upgrade pip
	build/lock/bin/pip install --quiet -e '.[dev]'
	{ sed -n '/^#/p' constraints.txt; build/lock/bin/pip freeze --exclude-editable | grep -v '^nbrecall'; } > constraints.new
	mv constraints.new constraints.txt && rm -rf build/lock

# Debian packages the browser test (chromium), the re-render sandbox (bubblewrap) and figure OCR (tesseract-ocr,
# with its English data) use; installed when root.
system-deps:
	@if command -v chromium >/dev/null && command -v bwrap >/dev/null && command -v tesseract >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium bubblewrap \
			tesseract-ocr tesseract-ocr-eng >/dev/null; \
	else echo "note: install chromium, bubblewrap and tesseract-ocr for the browser, sandbox and OCR tests" \
		"(they skip without them)"; fi

# The Pyodide render backend's Node.js runner (npm package pinned by its package-lock.json).
PYODIDE_RUNNER := src/nbrecall/render/pyodide_runner
pyodide-runner: $(PYODIDE_RUNNER)/node_modules/.package-lock.json
$(PYODIDE_RUNNER)/node_modules/.package-lock.json: $(PYODIDE_RUNNER)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(PYODIDE_RUNNER) --no-audit --no-fund --loglevel=error; \
	else echo "note: install Node.js and npm for the pyodide render backend (its tests skip without them)"; fi

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# mypy over src alone (settings in pyproject.toml); `lint` runs it too
typecheck: venv
	$(BIN)/mypy

# The whole suite; a test whose tool (chromium, bubblewrap, PostgreSQL, ray, ...) is missing fails instead of
# skipping, so CI (`.ci/run`) cannot pass on a machine that silently ran less.
test: venv system-deps pyodide-runner lint
	NBRECALL_REQUIRE_TOOLS=1 $(BIN)/pytest

# The edit loop: everything but the slow tests and those needing PostgreSQL, the sandbox, a browser or Ray.
test-fast: venv
	$(BIN)/pytest -m "not (slow or postgres or sandbox or browser or ray)"

demo: venv
	$(BIN)/nbrecall convert samples/archive -o $(DEMO)/converted
	$(BIN)/nbrecall index samples/archive --config samples/nbrecall.toml --index $(DEMO)/index
	$(BIN)/nbrecall status --index $(DEMO)/index
	$(BIN)/nbrecall search "what ballast volume did we use aft for the 130 m PSV" --config samples/nbrecall.toml --index $(DEMO)/index -k 3
	$(BIN)/nbrecall search "KeyError pile_diameter" --config samples/nbrecall.toml --index $(DEMO)/index -k 2
	$(BIN)/nbrecall search "free surface effect" --config samples/nbrecall.toml --index $(DEMO)/index -k 2 --json
	$(BIN)/nbrecall ask "what ballast volume did we use aft for the 130 m PSV?" --config samples/nbrecall.toml --index $(DEMO)/index
	@echo "Serving (and watching) the sample archive at http://127.0.0.1:8765/ (Ctrl-C to stop)"
	$(BIN)/nbrecall serve samples/archive --watch --config samples/nbrecall.toml --index $(DEMO)/index --host 127.0.0.1 --port 8765

clean:
	rm -rf $(VENV) build .pytest_cache

# Two entry points for a fresh Debian machine (run as root): `make run` and `make test`.
# Both install what is missing (system packages through apt, Python packages into .venv).
#
#   make run [PORT=9000]   tether serve (MCP over HTTP + the panel) from this checkout
#   make test              ruff, mypy (as 3.11 and as 3.13) and the whole suite on the default
#                          Python (3.11), then `make smoke` (the wheel on 3.11, 3.12 and 3.13) and
#                          `make test-clients` (the real MCP clients, when the npm registry answers)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# python3-venv: Debian's python3 has no ensurepip, so `python3 -m venv` (the next step) needs it.
SYSTEM := python3 python3-venv tmux bubblewrap strace chromium nodejs npm procps git ca-certificates \
          openssh-server openssh-client
# The default interpreter makes .venv; the smoke subset also runs on the others.
PYTHON         ?= python3
SMOKE_PYTHONS  ?= 3.11 3.12 3.13
# Outside the checkout (so an installed wheel is what runs) and one per checkout (other checkouts on
# this machine run their own).
SCRATCH := $(or $(TMPDIR),/tmp)/tether-build-$(shell printf '%s' '$(CURDIR)' | md5sum | cut -c1-10)
DIST    := $(CURDIR)/dist
PORT    ?=

.PHONY: run test system venv panel-assets lint typecheck pytest wheel smoke test-clients test-clients-if-online bench clean

system:
	@missing=""; for p in $(SYSTEM); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if command -v node >/dev/null && command -v npm >/dev/null; then \
	  missing=$$(echo "$$missing" | sed -e 's/ nodejs//' -e 's/ npm//'); fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: system $(STAMP)

# xterm.js from the npm registry into src/tether/panel/static/vendor (never committed); the same
# script runs inside every wheel build.
panel-assets: system
	@$(PYTHON) build_support/panel_assets.py

lint: venv
	$(VENV)/bin/ruff check src tests bench build_support setup.py
	$(VENV)/bin/ruff format --check src tests bench

typecheck: venv
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --python-version 3.13

pytest: venv panel-assets
	$(VENV)/bin/pytest

# Three workers on two cores: most of a test's time is waiting for its tmux server, shells and
# processes, so the suite fits its budget (10 minutes on 2 cores) even on a busy machine.
PYTEST_WORKERS ?= 3

test: venv panel-assets
	$(VENV)/bin/ruff check src tests bench build_support setup.py
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --python-version 3.13
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS)
	$(MAKE) --no-print-directory smoke
	$(MAKE) --no-print-directory test-clients-if-online

# The wheel as a user gets it: `python -m build` makes the sdist, then the wheel from the sdist
# (which fetches the panel's assets itself).
wheel: venv
	@mkdir -p $(SCRATCH)
	rm -rf $(DIST)
	$(PY) -m build --outdir $(DIST) . > $(SCRATCH).build.log 2>&1 || { cat $(SCRATCH).build.log; exit 1; }
	@ls $(DIST)/*.whl

# For each version: find (or install) the interpreter, pip-install the wheel into a fresh venv
# outside the checkout, run the smoke subset with that venv's pytest. A version that cannot be
# had fails the target, loudly (build_support/find-python says what it tried).
smoke: wheel
	@set -e; failed=""; for v in $(SMOKE_PYTHONS); do \
	  echo "== smoke on Python $$v"; \
	  py=$$(build_support/find-python $$v) || { failed="$$failed $$v(missing)"; continue; }; \
	  env=$(SCRATCH)/venv-$$v; rm -rf $$env; \
	  log=$(SCRATCH)/pip-$$v.log; echo "   $$py, venv $$env"; \
	  { $$py -m venv $$env && $$env/bin/pip install --upgrade pip && \
	    (cd / && $$env/bin/pip install "$$(ls $(DIST)/*.whl)[test]"); } > $$log 2>&1 \
	    || { tail -30 $$log; failed="$$failed $$v(install)"; continue; }; \
	  $$env/bin/python -m pytest tests/smoke -p no:cacheprovider || failed="$$failed $$v(tests)"; \
	done; \
	if [ -n "$$failed" ]; then echo "SMOKE FAILED on Python:$$failed" >&2; exit 1; fi; \
	echo "smoke passed on Python $(SMOKE_PYTHONS)"

# The real MCP clients (Claude Code, Codex CLI, Gemini CLI, MCP Inspector) from the npm registry,
# installed into a scratch prefix, checked against the README's configuration blocks.
test-clients: venv
	rm -rf $(SCRATCH)/clients && mkdir -p $(SCRATCH)/clients
	cp tests/clients/package.json tests/clients/package-lock.json $(SCRATCH)/clients/
	cd $(SCRATCH)/clients && npm ci --no-audit --no-fund --silent
	TETHER_CLIENTS=$(SCRATCH)/clients $(VENV)/bin/pytest tests/clients -p no:cacheprovider

test-clients-if-online:
	@if timeout 30 npm ping >/dev/null 2>&1; then $(MAKE) --no-print-directory test-clients; \
	else echo; echo "#### test-clients SKIPPED: the npm registry does not answer (npm ping failed)"; echo; fi

run: venv panel-assets
	$(VENV)/bin/tether serve $(if $(PORT),--port $(PORT))

bench: venv
	$(PY) bench/oneshot.py
	$(PY) bench/sessions.py
	$(PY) bench/termtext.py
	$(PY) bench/audit.py
	$(PY) bench/startup.py
	$(PY) bench/delay.py
	$(PY) bench/phases.py
	$(PY) bench/idle.py
	$(PY) bench/cpu.py

clean:
	rm -rf $(VENV) $(DIST) $(SCRATCH) $(SCRATCH).build.log src/tether/panel/node_modules src/tether/panel/static/vendor build

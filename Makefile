# Two entry points for a fresh Debian machine (run as root): `make run` and `make test`.
# Both install what is missing (system packages through apt, Python packages into .venv).
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SYSTEM := tmux bubblewrap strace chromium nodejs npm procps git ca-certificates
PANEL_VENDOR := src/tether/panel/static/vendor/.installed

.PHONY: run test system venv panel-assets lint typecheck pytest bench clean

system:
	@missing=""; for p in $(SYSTEM); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if command -v node >/dev/null && command -v npm >/dev/null; then \
	  missing=$$(echo "$$missing" | sed -e 's/ nodejs//' -e 's/ npm//'); fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: system $(STAMP)

$(PANEL_VENDOR): src/tether/panel/package.json
	cd src/tether/panel && npm install --no-audit --no-fund --silent
	mkdir -p src/tether/panel/static/vendor
	cp src/tether/panel/node_modules/@xterm/xterm/lib/xterm.js src/tether/panel/node_modules/@xterm/xterm/css/xterm.css \
	   src/tether/panel/node_modules/@xterm/addon-fit/lib/addon-fit.js src/tether/panel/static/vendor/
	touch $@

panel-assets: $(PANEL_VENDOR)

lint: venv
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: venv
	$(VENV)/bin/mypy

pytest: venv panel-assets
	$(VENV)/bin/pytest

test: venv panel-assets
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

run: venv panel-assets
	$(VENV)/bin/tether serve

bench: venv
	$(PY) bench/oneshot.py
	$(PY) bench/sessions.py
	$(PY) bench/termtext.py
	$(PY) bench/audit.py

clean:
	rm -rf $(VENV) src/tether/panel/node_modules src/tether/panel/static/vendor

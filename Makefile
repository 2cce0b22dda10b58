# Python to Silicon: set-up, site and tests.
#
#   make serve   build and serve the site at http://127.0.0.1:8000
#                (RECORDS=DIR adds your records, from `python -m examples.lab run --out DIR`)
#   make test    the same set-up, plus Debian's Chromium; build the site and run every test
#                (on PYTEST_WORKERS=2 processes, reading that build as it is done)
#   make pdf     the same set-up and Chromium; build the site, print its print edition to $(PDF)
#   make publish the site as GitHub Pages serves it (pages.yml): make pdf's PDF and a zip of the
#                whole site, both inside the site, where its landing page links them
#
# Set-up is idempotent: stamp files under .venv/ and node_modules/ record what is
# done, and are redone only when pyproject.toml or package-lock.json change.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch is installed FIRST and pinned: a looser spec lets pip fetch a multi-GB CUDA
# build on a CPU machine. A torch already in .venv (say, your CUDA build) is kept.
TORCH_SPEC ?= torch==2.13.0
CHROMIUM   := /usr/bin/chromium
SITE_DIR   := site
# The published site's own copies of the book (make publish; docs/index.md links these two paths).
SITE_PDF   := $(SITE_DIR)/python-to-silicon.pdf
SITE_ZIP   := $(SITE_DIR)/python-to-silicon-site.zip
# make pdf's output; links in it to the site's files (records, sources) point at SITE_URL.
PDF        ?= $(SITE_PDF)
SITE_URL   ?= http://127.0.0.1:8000/
# Material 9.7+ prints an end-of-life banner on every build; the pins are deliberate.
export NO_MKDOCS_2_WARNING := 1
# make serve RECORDS=DIR (or build): a folder of your own records, shown beside the book's.
RECORDS ?=
LAB_ENV := $(if $(strip $(RECORDS)),LAB_EXTRA_RECORDS="$(abspath $(RECORDS))")

.PHONY: help setup serve build test pdf publish clean distclean

help:
	@echo "make serve   build and serve the site at http://127.0.0.1:8000"
	@echo "             RECORDS=DIR: your records (examples.lab run --out DIR) beside the book's"
	@echo "make test    set up, install Chromium, build the site, run every test"
	@echo "make build   build the site into $(SITE_DIR)/ (strict)"
	@echo "make pdf     build the site, then print the book to $(PDF) with Chromium"
	@echo "make publish build the site, print the book into it, zip the site into it (SITE_URL=...)"
	@echo "make clean   remove the built site; make distclean also .venv/ and node_modules/"

# The set-up's parts run side by side (make -j): npm's download beside pip's (each mostly
# waits on the network: about 16 s less), and the bytecode of what pip installs written by
# compileall on every core, torch's while pip installs the project (pip writes it one file at
# a time: about half of its minute and a half on one core of a 2-core CI).
setup:
	@$(MAKE) --no-print-directory -j3 $(VENV)/.stamp-bytecode node_modules/.stamp-npm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.stamp-torch: | $(BIN)/python
	@if $(BIN)/python -c "import torch" 2>/dev/null; then \
	  echo "keeping torch $$($(BIN)/python -c 'import torch; print(torch.__version__)') already in $(VENV)"; \
	else \
	  $(BIN)/python -m pip install --quiet --no-compile "$(TORCH_SPEC)"; \
	fi
	touch $@

# The project and its dependencies through uv, which downloads them side by side where pip
# fetches one at a time (the set-up's longest step, mostly waiting on the network). uv keeps
# the torch installed above (it satisfies the project's "torch>=2.4"), and writes no bytecode
# (the compileall below does, on every core).
UV_SPEC ?= uv==0.13.9
$(VENV)/.stamp-project: pyproject.toml $(VENV)/.stamp-torch
	$(BIN)/python -m pip install --quiet "$(UV_SPEC)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[docs,test,triton,onnx,fp8]"
	touch $@

# The .pyc files pip would have written (where Python may not write them itself, as with
# PYTHONDONTWRITEBYTECODE in many containers, every process would compile torch again). A
# file that is not Python this interpreter reads (torch ships one in 3.12's syntax) is left
# without one, as pip leaves it: hence -qq and "|| true". Files already compiled are skipped.
COMPILEALL = $(BIN)/python -m compileall -qq -j 0
SITE_PACKAGES = $$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

$(VENV)/.stamp-torch-bytecode: $(VENV)/.stamp-torch
	$(COMPILEALL) "$(SITE_PACKAGES)/torch" || true
	touch $@

$(VENV)/.stamp-bytecode: $(VENV)/.stamp-project $(VENV)/.stamp-torch-bytecode
	$(COMPILEALL) "$(SITE_PACKAGES)" || true
	touch $@

node_modules/.stamp-npm: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# Debian's Chromium drives tests/test_browser.py; the test fails (never skips) without it.
$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "error: $(CHROMIUM) is missing and installing it needs root:" >&2; \
	  echo "       run 'sudo apt-get update && sudo apt-get install -y chromium', then 'make test' again" >&2; \
	  exit 1; \
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation </dev/null >/dev/null
	@test -x $@ || { echo "error: apt-get installed chromium but $@ is not there" >&2; exit 1; }

serve: setup
	$(LAB_ENV) $(BIN)/mkdocs serve -a 127.0.0.1:8000

build: setup
	$(LAB_ENV) $(BIN)/mkdocs build --strict -d $(SITE_DIR)

# The suite (tests/) runs on PYTEST_WORKERS processes (pytest-xdist); --dist loadgroup keeps
# the tests that share a costly fixture on one of them (tests/conftest.py). The pages' and
# docstrings' examples (Sybil; docs/, examples/) run in one process, in order: the examples
# of a page share a namespace, which two workers would split. The strict build of the site
# (as `make build`) and the pages' examples run beside the suite: each is one process, and
# alone each left a core idle (about 40 s in all). The tests read the site that build makes
# (LAB_BUILT_SITE), waiting for it (LAB_BUILT_SITE_STATUS) only where they need it; a build
# with your RECORDS is not the book's, so then they build their own. The build's and the
# pages' output is shown after the suite's (the pages' run keeps no .pytest_cache: the
# suite's is the suite's alone). Exit status: 1 if the build failed, else the first
# failure's; 5 (no tests) only if neither pytest run collected any.
PYTEST_WORKERS ?= 2
# OpenMP's idle threads (torch's CPU ops) sleep at once instead of spinning first: the build,
# the pages' examples and two workers share two cores, and spinning threads took them from the
# processes with work (the suite's examples and collectives: 367 -> 268 CPU-s). The threads and
# the results are the same; only how a thread with nothing to do waits differs. Yours is kept.
test: export OMP_WAIT_POLICY ?= PASSIVE
test: setup $(CHROMIUM)
	@scratch=$$(mktemp -d); trap 'rm -rf "$$scratch"' EXIT; \
	( rc=0; $(LAB_ENV) $(BIN)/mkdocs build --strict -d $(SITE_DIR) >"$$scratch/build.log" 2>&1 || rc=$$?; \
	  echo "exit $$rc" >"$$scratch/build.part" && mv "$$scratch/build.part" "$$scratch/build.status" ) & build=$$!; \
	( rc=0; $(BIN)/python -m pytest -p no:xdist -p no:cacheprovider $(PYTEST_ARGS) docs examples >"$$scratch/pages.log" 2>&1 || rc=$$?; \
	  echo $$rc >"$$scratch/pages.status" ) & pages_run=$$!; \
	suite=0; $(if $(strip $(RECORDS)),,LAB_BUILT_SITE="$(abspath $(SITE_DIR))" LAB_BUILT_SITE_STATUS="$$scratch/build.status") \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests || suite=$$?; \
	wait $$build; echo "== mkdocs build --strict -d $(SITE_DIR) (ran beside the tests)"; cat "$$scratch/build.log"; \
	wait $$pages_run; echo "== pytest docs examples (ran beside the tests)"; cat "$$scratch/pages.log"; \
	pages=$$(cat "$$scratch/pages.status"); \
	if [ "$$(cat "$$scratch/build.status")" != "exit 0" ]; then \
	  echo "error: mkdocs build --strict failed ($$(cat "$$scratch/build.status"))" >&2; exit 1; fi; \
	if [ $$suite -eq 5 ] && [ $$pages -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 5; fi; \
	for s in $$suite $$pages; do if [ $$s -ne 0 ] && [ $$s -ne 5 ]; then exit $$s; fi; done

# The print edition: the strict build (whose print_page/ holds every chapter), printed by the
# browser tests' Chromium (overrides/print_pdf.py), which then checks that the PDF holds every
# chapter's title and every plot. SITE_URL: where its links to the site's files point.
pdf: setup $(CHROMIUM)
	$(LAB_ENV) $(BIN)/mkdocs build --strict -d $(SITE_DIR)
	$(BIN)/python overrides/print_pdf.py $(SITE_DIR) $(PDF) --site-url "$(SITE_URL)"

# The site as published (.github/workflows/pages.yml): the strict build, the book printed into it
# as $(SITE_PDF), then the whole site, that PDF included, zipped into it as $(SITE_ZIP) for reading
# offline (overrides/zip_site.py: the zip leaves itself out). SITE_URL: where the site is
# published, which the PDF's links to the site's files point at. Always the book's own records:
# RECORDS is refused before any set-up, as a reader's machine has no place on the published site.
ifneq ($(filter publish,$(MAKECMDGOALS)),)
ifneq ($(strip $(RECORDS)),)
$(error make publish builds the book's own site; RECORDS is for make serve, build, test or pdf)
endif
endif
publish: setup $(CHROMIUM)
	$(BIN)/mkdocs build --strict -d $(SITE_DIR)
	$(BIN)/python overrides/print_pdf.py $(SITE_DIR) $(SITE_PDF) --site-url "$(SITE_URL)"
	$(BIN)/python overrides/zip_site.py $(SITE_DIR) $(SITE_ZIP)

clean:
	rm -rf $(SITE_DIR)

distclean: clean
	rm -rf $(VENV) node_modules

# p4-ai-fabric: `make run` runs the main job, `make test` runs every test.
# Both set themselves up (Debian packages, .venv) and use the native p4c/BMv2
# when found ($P4_TOOLCHAIN_BIN, PATH, /opt/p4/bin), else Docker if an engine runs.

SHELL      := /bin/bash
VENV       := .venv
PY         := $(VENV)/bin/python
TOPO       ?= leaf-spine
ARGS       ?=
IMAGE      ?= p4-ai-fabric
DOCKER_RUN := docker run --rm --privileged -v /lib/modules:/lib/modules:ro

# Native toolchain present? (same search as control/toolchain.py)
HAVE_NATIVE := $(shell for t in p4c-bm2-ss simple_switch_grpc; do \
	  { [ -n "$$P4_TOOLCHAIN_BIN" ] && [ -x "$$P4_TOOLCHAIN_BIN/$$t" ]; } || command -v $$t >/dev/null 2>&1 || [ -x /opt/p4/bin/$$t ] || exit 0; \
	done; echo yes)
HAVE_DOCKER := $(shell docker info >/dev/null 2>&1 && echo yes)

.PHONY: help setup doctor build run test unit ptf e2e bench fixtures clean \
        docker-build docker-run docker-test require-toolchain

help:
	@echo "make run [TOPO=leaf-spine] [ARGS=--no-cli]  build, start, program, ping all pairs, open the CLI"
	@echo "make test                                   unit + PTF data-plane + end-to-end tests"
	@echo "make doctor                                 what toolchain was found, and how to get what is missing"
	@echo "make build | bench | docker-build | docker-run | docker-test | clean"

setup:
	@bash scripts/setup.sh

doctor: setup
	@$(PY) -m control.toolchain

build: setup
	@$(PY) -m control.build

ifeq ($(HAVE_NATIVE),yes)
run: setup
	$(PY) -m control.run --topology $(TOPO) $(ARGS)
else ifeq ($(HAVE_DOCKER),yes)
run: docker-run
else
run: setup
	@$(PY) -m control.toolchain; exit 1
endif

require-toolchain: setup
	@$(PY) -m control.toolchain >/dev/null || { $(PY) -m control.toolchain; \
	  echo; echo "make test: FAILED: p4c/BMv2 missing, the data-plane tests cannot run."; \
	  echo "Use Docker (make docker-test) or install p4c and BMv2 (see README)."; exit 1; }

unit: setup
	$(PY) -m pytest tests/unit -q

ptf: require-toolchain build
	$(PY) ptf-tests/run_ptf.py

e2e: require-toolchain build
	$(PY) -m pytest tests/e2e -q

ifeq ($(HAVE_NATIVE),yes)
test: unit ptf e2e
else ifeq ($(HAVE_DOCKER),yes)
test: unit docker-test
else
test: unit require-toolchain
endif

# Refresh the P4Info the unit tests use (tests/e2e/test_build.py checks it is current).
fixtures: build
	cp build/main.p4info.txtpb tests/fixtures/main.p4info.txtpb

# Regenerates the table in the README and build/bench/{summary.csv,forwarding_rate.png}.
bench: require-toolchain build
	$(PY) benchmarks/forwarding_rate.py --readme README.md $(ARGS)

docker-build:
	docker build -f docker/Dockerfile -t $(IMAGE) .

docker-run: docker-build
	$(DOCKER_RUN) -it $(IMAGE) make run TOPO=$(TOPO) ARGS="$(ARGS)"

docker-test: docker-build
	$(DOCKER_RUN) $(IMAGE) make test

clean:
	rm -rf build

# p4-ai-fabric: `make run` runs the main job, `make test` runs every test.
# Both set themselves up (Debian packages, .venv) and use the native p4c/BMv2
# when found ($P4_TOOLCHAIN_BIN, PATH, /opt/p4/bin), else Docker if an engine runs.

SHELL      := /bin/bash
VENV       := .venv
PY         := $(VENV)/bin/python
FABRIC     := $(VENV)/bin/fabric
TOPO       ?= leaf-spine
ARGS       ?=
IMAGE      ?= p4-ai-fabric
# Container engine of the docker-* targets: docker or podman (make docker-run
# DOCKER=podman); by default the first that answers, else the first installed.
# DOCKER_FLAGS: options that engine needs on this host (podman on hybrid
# cgroups: --runtime runc). Both are worked out once, and only when used.
DOCKER       ?= $(eval DOCKER := $(shell bash docker/engine.sh detect))$(DOCKER)
DOCKER_FLAGS ?= $(eval DOCKER_FLAGS := $(shell bash docker/engine.sh flags $(DOCKER)))$(DOCKER_FLAGS)
# P4C_IMAGE: base image of docker/Dockerfile if set (its default: docker.io/p4lang/p4c:latest).
# DOCKER_TEST: the goals docker-test makes inside the container.
P4C_IMAGE   ?=
DOCKER_TEST ?= test
# BUILD_FLAGS: options of docker-build's `build` (scripts/test_docker.sh: --network host).
BUILD_FLAGS ?=
# KATHARA=no: make test without the Kathara labs. docker-test passes it: the labs
# start containers on the host's Docker from images of the host's toolchain
# (make test-kathara on the host), not from inside the project's container.
KATHARA     ?= yes
# DOCKER_PRIVILEGED: how this host runs a privileged container (docker/engine.sh).
DOCKER_PRIVILEGED ?= $(eval DOCKER_PRIVILEGED := $(shell bash docker/engine.sh privileged $(DOCKER)))$(DOCKER_PRIVILEGED)
DOCKER_RUN  = $(DOCKER) $(DOCKER_FLAGS) run --rm $(DOCKER_PRIVILEGED) \
	$(if $(wildcard /lib/modules),-v /lib/modules:/lib/modules:ro)

# Native toolchain present? (same search as emulator/toolchain.py)
HAVE_NATIVE := $(shell for t in p4c-bm2-ss simple_switch_grpc; do \
	  { [ -n "$$P4_TOOLCHAIN_BIN" ] && [ -x "$$P4_TOOLCHAIN_BIN/$$t" ]; } || command -v $$t >/dev/null 2>&1 || [ -x /opt/p4/bin/$$t ] || exit 0; \
	done; echo yes)
HAVE_DOCKER ?= $(eval HAVE_DOCKER := $(shell $(DOCKER) info >/dev/null 2>&1 && echo yes))$(HAVE_DOCKER)

.PHONY: help setup doctor build run train test test-kathara typecheck unit monitoring ptf e2e bench bench-constructs bench-aggregation experiments monitor fixtures clean generate features \
        docker-build docker-run docker-test test-docker require-toolchain

help:
	@echo "make run [TOPO=leaf-spine] [ARGS=--no-cli]  build, start, program, ping all pairs, open the CLI"
	@echo "make test                                   unit + monitoring (real Prometheus) + PTF data-plane + end-to-end tests"
	@echo "make doctor                                 what toolchain was found, and how to get what is missing"
	@echo "make monitor [TOPO=leaf-spine]              INT collector, switch exporter, Prometheus next to a running network"
	@echo "make experiments | experiment-NAME          every experiment (CSV + PNG under experiments/results/), or one"
	@echo "make generate | features                    rewrite generated files; print the feature index"
	@echo "Everything here is also \`.venv/bin/fabric COMMAND\` (fabric --help)."
	@echo "make build | bench | bench-constructs | bench-aggregation | docker-build | docker-run | docker-test | clean"
	@echo "make test-docker                            docker-run + PTF in a container, on a locally built stand-in for p4lang/p4c"
	@echo "make test-kathara                           star, leaf-spine and fat-tree-k4 labs live on Kathara (part of make test; root)"

setup:
	@bash scripts/setup.sh

doctor: setup
	@$(FABRIC) doctor

build: setup
	@$(FABRIC) build

ifeq ($(HAVE_NATIVE),yes)
run: setup
	$(FABRIC) run --topology $(TOPO) $(ARGS)
else ifeq ($(HAVE_DOCKER),yes)
run: docker-run
else
run: setup
	@$(FABRIC) doctor; exit 1
endif

require-toolchain: setup
	@$(FABRIC) doctor >/dev/null || { $(FABRIC) doctor; \
	  echo; echo "make test: FAILED: p4c/BMv2 missing, the data-plane tests cannot run."; \
	  echo "Use Docker (make docker-test) or install p4c and BMv2 (see README)."; exit 1; }

unit: setup
	$(PY) -m pytest tests/unit -q

# The type checker over every package (configuration in pyproject.toml).
typecheck: setup
	$(PY) -m mypy

ptf: require-toolchain build
	$(PY) ptf-tests/run_ptf.py

# Collector, exporter and dashboards against a real Prometheus (Debian's package, from setup).
monitoring: setup
	$(PY) -m pytest tests/monitoring -q

e2e: require-toolchain build
	$(PY) -m pytest tests/e2e -q --durations=40

# The labs on Kathara, live (scripts/test_kathara.sh): a Docker daemon (its own
# if none answers), the images, Kathara's network plugin, then tests/kathara.
test-kathara: require-toolchain build
	bash scripts/test_kathara.sh

ifeq ($(HAVE_NATIVE),yes)
test: typecheck unit monitoring ptf e2e $(if $(filter yes,$(KATHARA)),test-kathara)
	@$(if $(filter yes,$(KATHARA)),true,echo "make test: passed without the Kathara labs (KATHARA=$(KATHARA)); they run on a host: make test-kathara")
else ifeq ($(HAVE_DOCKER),yes)
test: typecheck unit monitoring docker-test
else
test: typecheck unit monitoring require-toolchain
endif

# Refresh the P4Info the unit tests use (tests/e2e/test_build.py checks it is current).
fixtures: build
	cp build/main.p4info.txtpb tests/fixtures/main.p4info.txtpb

# Monitoring next to a running network (`make run` in another shell): INT collector,
# switch exporter and Prometheus on 127.0.0.1; prints the URLs, Ctrl-C stops them.
monitor: setup build
	$(FABRIC) monitor --topology $(TOPO) $(ARGS)

# PyTorch DDP across the fabric with every technique composed (docs/train.md);
# `make train ARGS="--topology leaf-spine --fail spine1@step5"`, `ARGS=--ablate`.
train: require-toolchain build
	$(FABRIC) train $(ARGS)

# Every experiment by name (the modules of experiments/ but common.py):
# `make experiments` runs them all, `make experiment-NAME ARGS=...` one.
experiments: require-toolchain build
	$(FABRIC) experiments $(ARGS)

experiment-%: require-toolchain build
	$(FABRIC) experiment $* $(ARGS)

# Everything generated and committed (aggregation lanes, topologies, dashboards, alerting rules).
generate: setup
	$(FABRIC) generate

# The feature index (the README's table).
features: setup
	@$(FABRIC) features

# Regenerates the tables of docs/benchmark.md: instructions per packet
# (callgrind, deterministic; each feature compiled out, off and on, and a
# packet dropped for each of four reasons), an
# aggregated element's cost by block size, and packets/s, with
# build/bench/{instructions_per_packet.csv,aggregation_cost.csv,summary.csv,forwarding_rate.png};
# then the RDMA transport's sender rate per congestion control (build/bench/rdma_agent/), and what
# mutual TLS costs P4Runtime at start-up and per write (build/bench/p4runtime_tls.csv).
bench: require-toolchain build
	$(PY) -m benchmarks.instructions_per_packet --packets 1000 --readme docs/benchmark.md
	$(PY) -m benchmarks.aggregation_cost --packets 1000 --readme docs/benchmark.md
	$(FABRIC) bench --readme docs/benchmark.md $(ARGS)
	$(PY) -m benchmarks.rdma_agent
	$(PY) -m benchmarks.p4runtime_tls

# Instructions per aggregation packet and per element at each block size,
# against plain UDP of the same size (callgrind, ~8 min).
bench-aggregation: require-toolchain
	$(PY) -m benchmarks.aggregation_cost --readme docs/benchmark.md $(ARGS)

# The price list of docs/benchmark.md: instructions per packet one P4
# construct (a header, a metadata field, an assignment, a condition, a
# table...) costs BMv2, from variants of basic_router (callgrind, ~7 min).
bench-constructs: require-toolchain
	$(PY) -m benchmarks.construct_costs --readme docs/benchmark.md $(ARGS)

docker-build:
	$(DOCKER) $(DOCKER_FLAGS) build $(BUILD_FLAGS) -f docker/Dockerfile -t $(IMAGE) \
	  $(if $(P4C_IMAGE),--build-arg P4C_IMAGE=$(P4C_IMAGE)) .

# -it only on a terminal (the CLI), so `make docker-run ARGS=--no-cli` also runs unattended.
docker-run: docker-build
	$(DOCKER_RUN) $(shell [ -t 0 ] && echo -it) $(IMAGE) make run TOPO=$(TOPO) ARGS="$(ARGS)"

docker-test: docker-build
	$(DOCKER_RUN) $(IMAGE) make $(DOCKER_TEST) KATHARA=no

# The Docker targets end to end on a container engine, without p4lang's image:
# builds a stand-in for p4lang/p4c from the p4c/BMv2 on this machine (see
# scripts/test_docker.sh). Not part of `make test`.
test-docker:
	bash scripts/test_docker.sh

clean:
	rm -rf build

#!/usr/bin/env bash
# make test-kathara: the project's labs run live on Kathara (Docker backend),
# driven through Kathara's Python API (tests/kathara/test_labs.py).
#
#  1. installs what it needs (Debian's docker.io, debootstrap) if missing;
#  2. uses the Docker daemon that answers ($DOCKER_HOST, else the default
#     socket), or starts a private one (data in $DATA_ROOT, socket
#     $PRIVATE_SOCKET, --bridge=none --iptables=false: it touches no host
#     network) and stops it at the end by its PID;
#  3. builds the images with scripts/test_docker.sh --build-only: a Debian
#     base (debootstrap), a stand-in for p4lang/p4c with this machine's
#     p4c/BMv2, the project's image on it (docker/Dockerfile). Switches,
#     hosts and the controller all run that image (BMv2 and the proxy; the
#     agents; `fabric program`);
#  4. registers Kathara's network plugin (kathara/katharanp_vde:<arch>, the
#     name Kathara asks Docker for) as the project's own driver,
#     docker/kathara-plugin/ (why: see network_driver.py), unless a plugin
#     of that name that is not ours is installed (Kathara's own: used as is);
#  5. runs tests/kathara/ with pytest: star, leaf-spine and fat-tree-k4
#     (KATHARA_TOPOLOGIES="..." for others), timing each step.
#
# Usage: scripts/test_kathara.sh [pytest options]
# Ends with one line "test-kathara: PASS ..." or "test-kathara: FAIL ..."; exit 0 on PASS.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

DATA_ROOT=/var/lib/p4-ai-fabric/docker
PRIVATE_RUN=/run/p4-ai-fabric-docker
PRIVATE_SOCKET=$PRIVATE_RUN/docker.sock
LOGDIR=$REPO/build/test-kathara
PLUGIN_DIR=$REPO/docker/kathara-plugin
PLUGIN_OURS="Kathara's network plugin (p4-ai-fabric"   # how our config.json's description starts
PY=$REPO/.venv/bin/python

T0=$SECONDS
STEP=setup
DOCKERD_PID=
WORK=
say() { printf '[test-kathara %4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() {
    echo "test-kathara: FAIL (${STEP}: $*; logs in ${LOGDIR#"$REPO"/})"
    exit 1
}
cleanup() {
    [[ -z $WORK ]] || rm -rf "$WORK"
    if [[ -n $DOCKERD_PID ]]; then
        say "stopping the private dockerd (pid $DOCKERD_PID)"
        kill "$DOCKERD_PID" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
        kill -9 "$DOCKERD_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'rc=$?; echo "test-kathara: FAIL (${STEP}: command failed, exit $rc, line $LINENO; logs in ${LOGDIR#"$REPO"/})"; exit 1' ERR

# shellcheck source=scripts/logged.sh
. "$REPO/scripts/logged.sh"

# ---------------------------------------------------------------- 1. tools
STEP="installing prerequisites"
[[ $(id -u) -eq 0 ]] || fail "needs root (a Docker daemon, debootstrap, the network plugin's bridges): sudo make test-kathara"
mkdir -p "$LOGDIR"
[[ -x $PY ]] || fail "no .venv: run make setup first"
need=()
command -v dockerd >/dev/null 2>&1 || [[ -x /usr/sbin/dockerd ]] || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ((${#need[@]})); then
    say "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    logged apt-install bash -c "apt-get -o DPkg::Lock::Timeout=600 update -qq && \
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends ${need[*]}"
fi

# ---------------------------------------------------------------- 2. engine
STEP="Docker daemon"
is_docker() { docker info --format '{{.ServerVersion}}' 2>/dev/null | grep -q . && ! docker --version | grep -qi podman; }
if [[ -n ${DOCKER_HOST:-} ]] && is_docker; then
    say "Docker at \$DOCKER_HOST ($DOCKER_HOST)"
elif [[ -z ${DOCKER_HOST:-} ]] && is_docker; then
    say "Docker at the default socket"
else
    export DOCKER_HOST=unix://$PRIVATE_SOCKET
    if is_docker; then
        say "the private dockerd already runs ($PRIVATE_SOCKET)"
    else
        DOCKERD=$(command -v dockerd || echo /usr/sbin/dockerd)
        mkdir -p "$DATA_ROOT" "$PRIVATE_RUN"
        say "starting a private dockerd ($DOCKERD; data in $DATA_ROOT, socket $PRIVATE_SOCKET)"
        "$DOCKERD" --data-root "$DATA_ROOT" --exec-root "$PRIVATE_RUN/exec" --pidfile "$PRIVATE_RUN/dockerd.pid" \
            -H "$DOCKER_HOST" --iptables=false --ip6tables=false --bridge=none >"$LOGDIR/dockerd.log" 2>&1 &
        DOCKERD_PID=$!
        for _ in $(seq 1 60); do is_docker && break; kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
        is_docker || { tail -n 20 "$LOGDIR/dockerd.log" | sed 's/^/    | /'; fail "dockerd did not answer (dockerd.log)"; }
    fi
fi
say "engine: Docker $(docker info --format '{{.ServerVersion}}')"

# ---------------------------------------------------------------- 3. images
STEP="images"
say "images (scripts/test_docker.sh --build-only; cached by their inputs)"
logged images env DOCKER=docker bash scripts/test_docker.sh --build-only
IMAGE=$(sed -n 's/^test-docker: images built: \([^ ]*\) .*/\1/p' "$LOGDIR/images.log")
[[ -n $IMAGE ]] || fail "scripts/test_docker.sh named no image (images.log)"
say "image of every device: $IMAGE ($(grep -c 'cached' "$LOGDIR/images.log" || true) steps cached)"

# ---------------------------------------------------------------- 4. plugin
STEP="network plugin"
case $(uname -m) in x86_64) ARCH=amd64 ;; aarch64) ARCH=arm64 ;; *) ARCH=$(uname -m) ;; esac
PLUGIN=kathara/katharanp_vde:$ARCH
OWN=1
if docker plugin inspect "$PLUGIN" >/dev/null 2>&1; then
    if docker plugin inspect --format '{{.Config.Description}}' "$PLUGIN" | grep -qF "$PLUGIN_OURS"; then
        docker plugin disable -f "$PLUGIN" >/dev/null 2>&1 || true
        logged plugin-rm docker plugin rm -f "$PLUGIN"
    else
        OWN=0
        say "$PLUGIN is installed and is not ours (Kathara's own): the labs run on it"
    fi
fi
if ((OWN)); then
    BASE=localhost/p4-ai-fabric-test/debian-base:$(. /etc/os-release && echo "$VERSION_CODENAME")
    logged plugin-image docker build --network host --build-arg "BASE=$BASE" -t localhost/p4-ai-fabric-test/katharanp \
        -f "$PLUGIN_DIR/Containerfile" "$PLUGIN_DIR"
    WORK=$(mktemp -d /var/tmp/p4-ai-fabric-kathara-plugin.XXXXXX)
    mkdir "$WORK/rootfs"
    cid=$(docker create localhost/p4-ai-fabric-test/katharanp)
    docker export "$cid" | tar -x -C "$WORK/rootfs"
    docker rm "$cid" >/dev/null
    cp "$PLUGIN_DIR/config.json" "$WORK/"
    logged plugin-create docker plugin create "$PLUGIN" "$WORK"
    rm -rf "$WORK"; WORK=
    logged plugin-enable docker plugin enable "$PLUGIN"
    say "network plugin: $PLUGIN is docker/kathara-plugin/network_driver.py"
fi

# ---------------------------------------------------------------- 5. labs
STEP="labs"
say "labs: ${KATHARA_TOPOLOGIES:-star leaf-spine fat-tree-k4} (tests/kathara)"
set +e
KATHARA_TEST_IMAGE=$IMAGE KATHARA_TEST_OWN_PLUGIN=$OWN KATHARA_TEST_TOPOLOGIES=${KATHARA_TOPOLOGIES:-star leaf-spine fat-tree-k4} \
    "$PY" -m pytest tests/kathara -q -s -p no:cacheprovider "$@" 2>&1 | tee "$LOGDIR/pytest.log"
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || fail "pytest exit $rc (pytest.log)"
STEP=finished
echo "test-kathara: PASS (Docker $(docker info --format '{{.ServerVersion}}'); image $IMAGE; $((SECONDS - T0)) s)"

#!/usr/bin/env bash
# make test-docker: the Docker path end to end on a real container engine,
# without p4lang's registry image.
#
#  1. installs what it needs (podman and runc if no engine runs; debootstrap);
#  2. builds a minimal Debian base image with debootstrap (cached);
#  3. configures podman where this host needs it (see README);
#  4. builds a stand-in for p4lang/p4c (tests/docker/p4c-standin.Containerfile):
#     the base image plus the p4c/BMv2 found on this machine, copied into
#     /usr/local as in p4lang's image, plus the host's apt sources, pip
#     configuration and CA certificates (cached by its inputs);
#  5. builds docker/Dockerfile on it, unchanged (make docker-build P4C_IMAGE=...);
#  6. runs `make docker-run ARGS=--no-cli` and `make docker-test DOCKER_TEST=ptf`
#     (privileged containers); with --full, `make docker-test` (every test).
#
# Usage: scripts/test_docker.sh [--full] [--rebuild] [--build-only]
#   DOCKER=docker|podman   engine (default: one that answers, else podman)
#   --rebuild              rebuild the base and stand-in images (not the project's)
#   --build-only           steps 1-5 only: the images, then stop (scripts/test_kathara.sh
#                          runs its labs on them)
# Builds run with --network host: a private dockerd started --bridge=none
# (scripts/test_kathara.sh) gives a build's containers no other network.
# Ends with one line "test-docker: PASS ..." or "test-docker: FAIL ..."; exit 0 on PASS.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

FULL=0
REBUILD=0
BUILD_ONLY=0
for arg in "$@"; do
    case $arg in
    --full) FULL=1 ;;
    --rebuild) REBUILD=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-docker: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

NAME=localhost/p4-ai-fabric-test
BASE_REPO=$NAME/debian-base
STANDIN_REPO=$NAME/p4c-standin
IMAGE=$NAME/fabric:latest
LOGDIR=$REPO/build/test-docker
PODMAN_CONF=/etc/containers/containers.conf.d/50-p4-ai-fabric-ulimits.conf

T0=$SECONDS
STEP=setup
WORK=
say() { printf '[test-docker %4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() {
    echo "test-docker: FAIL (${STEP}: $*; logs in ${LOGDIR#"$REPO"/})"
    exit 1
}
cleanup() { [[ -z $WORK ]] || rm -rf "$WORK"; }
trap cleanup EXIT
# shellcheck disable=SC2154  # rc is assigned in the trap
trap 'rc=$?; echo "test-docker: FAIL (${STEP}: command failed, exit $rc, line $LINENO; logs in ${LOGDIR#"$REPO"/})"; exit 1' ERR

# shellcheck source=scripts/logged.sh
. "$REPO/scripts/logged.sh"

# ---------------------------------------------------------------- 1. tools
STEP="installing prerequisites"
[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, rootful podman, privileged containers): sudo make test-docker"
mkdir -p "$LOGDIR"

ENGINE=${DOCKER:-}
if [[ -z $ENGINE ]]; then
    if docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=podman; fi
fi
is_podman() { [[ $ENGINE == podman ]] || "$ENGINE" --version 2>/dev/null | grep -qi podman; }

need=()
if is_podman; then
    command -v "$ENGINE" >/dev/null 2>&1 || need+=(podman)
    command -v runc >/dev/null 2>&1 || need+=(runc)
    command -v iptables >/dev/null 2>&1 || need+=(iptables)  # podman's container network
else
    command -v "$ENGINE" >/dev/null 2>&1 || fail "engine '$ENGINE' is not installed (DOCKER=podman, or install Docker)"
fi
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if ((${#need[@]})); then
    command -v apt-get >/dev/null 2>&1 || fail "missing ${need[*]} and no apt-get to install them"
    say "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    logged apt-install bash -c "apt-get update && apt-get install -y --no-install-recommends ${need[*]}"
fi
"$ENGINE" info >/dev/null 2>&1 || fail "'$ENGINE info' fails: the engine does not run here"
FLAGS=$(bash docker/engine.sh flags "$ENGINE")
say "engine: $ENGINE ${FLAGS:+(flags: $FLAGS)}$("$ENGINE" --version | head -1 | sed 's/^/; /')"
eng() { "$ENGINE" $FLAGS "$@"; }  # FLAGS: word-split on purpose
image_exists() { eng image inspect "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------ 2. base image
STEP="base image"
. /etc/os-release
CODENAME=${VERSION_CODENAME:-}
[[ -n $CODENAME && ( ${ID:-} == debian || ${ID:-} == ubuntu || ${ID_LIKE:-} == *debian* ) ]] ||
    fail "the stand-in is built with debootstrap for this host's Debian/Ubuntu release; this host is ${PRETTY_NAME:-unknown}"
# The archive the host's apt uses for its own release (the first deb entry for it).
apt_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        awk -v s="$CODENAME" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i+1) == s) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk -v s="$CODENAME" 'BEGIN { RS = "" } /Types:[^\n]*deb( |\n|$)/ && $0 ~ ("Suites:[^\n]*[ \t]" s "( |\n|$)") {
            if (match($0, /URIs:[ \t]*[^ \t\n]+/)) { u = substr($0, RSTART, RLENGTH); sub(/URIs:[ \t]*/, "", u); print u; exit } }' "$f"
    done
}
MIRROR=$(apt_mirror | head -1 || true)
[[ -n $MIRROR ]] || fail "no apt source for $CODENAME in /etc/apt"
BASE=$BASE_REPO:$CODENAME
if ((REBUILD)) || ! image_exists "$BASE"; then
    say "building base image $BASE: debootstrap --variant=minbase $CODENAME from $MIRROR (a few minutes)"
    WORK=$(mktemp -d /var/tmp/p4-ai-fabric-test-docker.XXXXXX)
    logged debootstrap debootstrap --variant=minbase "$CODENAME" "$WORK/rootfs" "$MIRROR"
    rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
    logged import bash -c "tar -C '$WORK/rootfs' -c . | $ENGINE import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD [\"bash\"]' - '$BASE'"
    rm -rf "$WORK"; WORK=
else
    say "base image $BASE: cached"
fi

# ----------------------------------------------------- 3. podman on this host
STEP="container engine configuration"
# podman (rootful) gives containers ulimits (nofile, nproc) above the hard limits
# of some hosts, and runc then fails ("error setting rlimits ... operation not
# permitted"); --ulimit flags do not help. There, have podman inherit the
# host's limits instead: default_ulimits = [] in containers.conf.
probe() { eng run --rm "$BASE" true >"$LOGDIR/probe.log" 2>&1; }
if ! probe; then
    if is_podman && grep -qi rlimit "$LOGDIR/probe.log" && [[ ! -f $PODMAN_CONF ]]; then
        say "podman's default ulimits exceed this host's hard limits: writing $PODMAN_CONF"
        mkdir -p "$(dirname "$PODMAN_CONF")"
        printf '%s\n' "# Written by p4-ai-fabric scripts/test_docker.sh: podman's default ulimits" \
            "# exceed this host's hard limits; containers inherit the host's limits instead." \
            "[containers]" "default_ulimits = []" >"$PODMAN_CONF"
    fi
    probe || { sed 's/^/    | /' "$LOGDIR/probe.log"; fail "cannot run a container (probe.log)"; }
fi
say "containers run${FLAGS:+ (with $FLAGS)}$([[ -f $PODMAN_CONF ]] && echo ", $PODMAN_CONF in place")"

# ------------------------------------------------------------ 4. stand-in
STEP="p4lang/p4c stand-in"
# The toolchain, searched as emulator/toolchain.py does.
find_tool() {
    local d
    for d in ${P4_TOOLCHAIN_BIN:+"$P4_TOOLCHAIN_BIN"} ${PATH//:/ } /opt/p4/bin; do
        [[ -x $d/$1 && -f $d/$1 ]] && { echo "$d/$1"; return 0; }
    done
    return 1
}
P4C=$(find_tool p4c-bm2-ss) || fail "p4c-bm2-ss not found (\$P4_TOOLCHAIN_BIN, PATH, /opt/p4/bin): the stand-in copies this machine's p4c/BMv2"
SSG=$(find_tool simple_switch_grpc) || fail "simple_switch_grpc not found"
find_tool simple_switch_CLI >/dev/null || fail "simple_switch_CLI not found"
PREFIX=$(cd "$(dirname "$(readlink -f "$P4C")")/.." && pwd)
[[ $(cd "$(dirname "$(readlink -f "$SSG")")/.." && pwd) == "$PREFIX" ]] ||
    fail "p4c ($P4C) and BMv2 ($SSG) are in different prefixes; the stand-in copies one prefix"
case $PREFIX in /usr | /usr/local | /) fail "p4c/BMv2 are in $PREFIX; the stand-in needs them in a prefix of their own (e.g. /opt/p4)" ;; esac

WORK=$(mktemp -d /var/tmp/p4-ai-fabric-test-docker.XXXXXX)
CTX=$WORK/ctx
mkdir -p "$CTX/host"
cp tests/docker/p4c-standin.Containerfile "$CTX/Containerfile"

# Host files, at their own paths under host/.
host_copy() {  # host_copy PATH... (files or directories; missing ones skipped)
    local p
    for p in "$@"; do
        [[ -e $p ]] || continue
        mkdir -p "$CTX/host$(dirname "$p")"
        cp -aL "$p" "$CTX/host$(dirname "$p")/"
    done
}
# apt: sources and the keyrings they name, network settings (Acquire::*).
# Not auth.conf(.d): credentials stay out of images.
host_copy /etc/apt/sources.list /etc/apt/trusted.gpg /etc/apt/trusted.gpg.d /etc/apt/apt.conf
for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do host_copy "$f"; done
for k in $(grep -hoiE '(signed-by[:=][[:space:]]*)[^] ,]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -E 's/^[Ss]igned-[Bb]y[:=][[:space:]]*//' || true); do
    [[ $k == /* ]] && host_copy "$k"
done
for f in /etc/apt/apt.conf.d/*; do grep -q 'Acquire' "$f" 2>/dev/null && host_copy "$f"; done
# CA certificates: the bundle, and local CAs so a regenerated bundle keeps them.
host_copy /etc/ssl/certs/ca-certificates.crt /usr/local/share/ca-certificates
[[ -f $CTX/host/etc/ssl/certs/ca-certificates.crt ]] || fail "no /etc/ssl/certs/ca-certificates.crt on the host"
# pip: global, XDG and user configuration (the containers run as root, so the
# user's goes to /root), files those name, PIP_* variables.
host_copy /etc/pip.conf /etc/xdg/pip
if [[ -d $HOME/.config/pip ]]; then mkdir -p "$CTX/host/root/.config"; cp -aL "$HOME/.config/pip" "$CTX/host/root/.config/"; fi
if [[ -f $HOME/.pip/pip.conf ]]; then mkdir -p "$CTX/host/root/.pip"; cp -aL "$HOME/.pip/pip.conf" "$CTX/host/root/.pip/"; fi
{
    echo "# PIP_* variables of the host that built this image (scripts/test_docker.sh)"
    echo "[global]"
    env | grep -E '^PIP_[A-Z0-9_]+=' | grep -v '^PIP_CONFIG_FILE=' | sort | while IFS='=' read -r k v; do
        k=${k#PIP_}; k=${k,,}; echo "${k//_/-} = $v"
    done || true
} >"$CTX/host/etc/pip-host-env.conf"
unreachable=()
for v in $(find "$CTX/host" -type f \( -name 'pip*.conf' -o -name 'pip.ini' \) -exec cat {} + |
        grep -E '^[[:space:]]*[a-z-]+[[:space:]]*=' | sed -E 's/^[^=]*=//' || true); do
    p=${v#file://}
    [[ $p == /* ]] || continue
    if [[ -f $p ]]; then host_copy "$p"; else unreachable+=("$v"); fi
done
((${#unreachable[@]} == 0)) ||
    say "note: pip settings naming host directories, not in the image (pip skips them there): $(printf '%s\n' "${unreachable[@]}" | sort -u | tr '\n' ' ')"

# Cache key: what the stand-in is made of (base image, toolchain files, host
# settings, the Containerfile, this script), without copying anything yet.
KEY=$( {
    eng image inspect --format '{{.Id}}' "$BASE"
    echo "$PREFIX"
    (cd "$PREFIX" && find . -printf '%p %s %T@ %l\n' | sort)
    (cd "$CTX" && find Containerfile host -type f -print0 | sort -z | xargs -0 sha256sum)
    sha256sum "$0" | cut -d' ' -f1
} | sha256sum | cut -c1-16)
STANDIN=$STANDIN_REPO:$KEY

declare -A owner=()
pkg_of() {  # pkg_of LIB_PATH: sets PKG to the Debian package owning it (merged /usr aware)
    local p q out
    PKG=${owner[$1]:-}
    [[ -n $PKG ]] && return 0
    for p in "$1" "$(readlink -f "$1")"; do
        for q in "$p" "${p/#\/usr\/lib\//\/lib\/}" "${p/#\/lib\//\/usr\/lib\/}"; do
            out=$(dpkg-query -S "$q" 2>/dev/null | grep -v '^diversion' | head -1 | sed 's/[:,].*//' || true)
            if [[ -n $out ]]; then owner[$1]=$out; PKG=$out; return 0; fi
        done
    done
    return 1
}

build_standin() {
    # The toolchain: a copy of its prefix (hard links when possible), scripts
    # rewritten for /usr/local; the Debian packages of the libraries it links to.
    cp -al "$PREFIX/." "$CTX/p4/" 2>/dev/null || { rm -rf "$CTX/p4"; cp -a "$PREFIX/." "$CTX/p4/"; }
    local f elf lib path
    for f in "$CTX"/p4/bin/*; do
        if [[ -f $f && ! -L $f ]] && grep -Iq "$PREFIX" "$f"; then sed -i "s#$PREFIX#/usr/local#g" "$f"; fi
    done
    # Besides the libraries: what p4c runs (cpp) and what BMv2's Python CLI imports
    # (python3-six as in p4lang's BMv2 image: Debian's python3-thrift needs it but
    # does not depend on it).
    local -A pkgs=([cpp]=1 [python3]=1 [python3-thrift]=1 [python3-six]=1 [ca-certificates]=1)
    local missing_libs=()
    while IFS= read -r elf; do
        while read -r lib path; do
            if [[ $path == "not" ]]; then  # fine if the prefix has it (found there by RUNPATH or ldconfig)
                compgen -G "$CTX/p4/lib*/$lib" >/dev/null || missing_libs+=("$lib (needed by ${elf#"$CTX/p4/"})")
                continue
            fi
            [[ $path == "$PREFIX"/* || -z $path ]] && continue
            if pkg_of "$path"; then pkgs[$PKG]=1; elif [[ ! -e $CTX/p4/lib/$(basename "$path") ]]; then
                # Not from a package (e.g. built from source elsewhere): copy it.
                cp -L "$path" "$CTX/p4/lib/"
                say "note: $path is in no Debian package; copied into /usr/local/lib"
            fi
        done < <(ldd "$elf" 2>/dev/null | awk '/=>/ { print $1, $3 }')
    done < <(find "$CTX/p4" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
    ((${#missing_libs[@]} == 0)) || fail "libraries not found on the host: ${missing_libs[*]}"
    printf '%s\n' "${!pkgs[@]}" | sort >"$CTX/packages.txt"
    cp "$CTX/packages.txt" "$LOGDIR/standin-packages.txt"

    say "building the stand-in $STANDIN from $PREFIX ($(du -sh "$PREFIX" | cut -f1); $(wc -l <"$CTX/packages.txt") Debian packages)"
    local nocache=()
    ((REBUILD)) && nocache=(--no-cache)
    logged standin-build eng build --network host "${nocache[@]}" --build-arg "BASE=$BASE" --build-arg "TOOLCHAIN_PREFIX=$PREFIX" \
        -t "$STANDIN" -f "$CTX/Containerfile" "$CTX"
    grep -E '^(BMv2 Python modules|p4include and cpp|Version [0-9]|[0-9]+\.[0-9.]+-)' "$LOGDIR/standin-build.log" | sed 's/^/    /' || true
    # Older stand-ins are superseded.
    local old
    for old in $(eng images --format '{{.Repository}}:{{.Tag}}' | grep "^$STANDIN_REPO:" | grep -v ":$KEY$" || true); do
        eng rmi "$old" >/dev/null 2>&1 || true
    done
}
if ((REBUILD)) || ! image_exists "$STANDIN"; then
    build_standin
else
    say "stand-in $STANDIN: cached"
fi
rm -rf "$WORK"; WORK=

# ------------------------------------------------- 5-6. the project's targets
MAKEVARS=(DOCKER="$ENGINE" DOCKER_FLAGS="$FLAGS" IMAGE="$IMAGE" P4C_IMAGE="$STANDIN" BUILD_FLAGS="--network host")
STEP="make docker-build"
say "make docker-build (docker/Dockerfile on the stand-in)"
logged docker-build make --no-print-directory docker-build "${MAKEVARS[@]}"
if ((BUILD_ONLY)); then
    echo "test-docker: images built: $IMAGE (on $STANDIN; $((SECONDS - T0)) s)"
    exit 0
fi

run_step() {  # run_step NAME MAKE-ARGS...: live output, also logged
    local name=$1
    shift
    STEP="make $*"
    say "make $* (privileged container)"
    if ! make --no-print-directory "$@" "${MAKEVARS[@]}" 2>&1 | tee "$LOGDIR/$name.log" | sed 's/^/    | /'; then
        fail "exit ${PIPESTATUS[0]} (${name}.log)"
    fi
}
run_step docker-run docker-run ARGS=--no-cli
if ((FULL)); then
    run_step docker-test docker-test
else
    run_step docker-test-ptf docker-test DOCKER_TEST=ptf
fi

STEP="finished"
echo "test-docker: PASS ($ENGINE; stand-in $STANDIN; make docker-run ARGS=--no-cli and make docker-test$( ((FULL)) || echo " DOCKER_TEST=ptf") passed; $((SECONDS - T0)) s)"

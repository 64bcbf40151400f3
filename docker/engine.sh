#!/usr/bin/env bash
# Which container engine the docker-* Make targets use, and the options it
# needs on this host. Docker and podman take the same commands; podman-docker's
# `docker` command is podman too.
#
#   docker/engine.sh detect        print docker or podman: the first whose
#                                  service answers, else the first installed
#   docker/engine.sh flags ENGINE  print global options ENGINE needs here
#                                  (nothing, except for podman on hosts below)
#
# podman on a host with hybrid cgroups (v1 controllers plus a cgroup2 mount at
# /sys/fs/cgroup/unified): its default runtime crun refuses to start containers
# ("cgroups in hybrid mode not supported"); runc works, so use it there.
# (podman's default ulimits above a host's hard limits cannot be fixed by a
# flag: see README, "Docker with podman".)
set -euo pipefail

is_podman() {
    # `docker` may be podman (podman-docker): ask the command itself.
    [[ $1 == podman ]] || "$1" --version 2>/dev/null | grep -qi podman
}

hybrid_cgroups() {
    [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) != cgroup2fs ]] &&
        [[ $(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]
}

case ${1:-} in
detect)
    for e in docker podman; do
        if "$e" info >/dev/null 2>&1; then echo "$e"; exit 0; fi
    done
    for e in docker podman; do
        if command -v "$e" >/dev/null 2>&1; then echo "$e"; exit 0; fi
    done
    echo docker
    ;;
flags)
    engine=${2:?usage: $0 flags ENGINE}
    is_podman "$engine" || exit 0
    runtime=$("$engine" info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || true)
    if [[ $runtime == crun ]] && hybrid_cgroups; then
        if command -v runc >/dev/null 2>&1; then
            echo "--runtime runc"
        else
            echo "docker/engine.sh: podman's runtime crun does not run on this host's hybrid cgroups; install runc" >&2
        fi
    fi
    ;;
*)
    echo "usage: $0 detect | flags ENGINE" >&2
    exit 2
    ;;
esac

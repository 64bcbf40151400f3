#!/usr/bin/env bash
# Which container engine the docker-* Make targets use, and the options it
# needs on this host. Docker and podman take the same commands; podman-docker's
# `docker` command is podman too.
#
#   docker/engine.sh detect        print docker or podman: the first whose
#                                  service answers, else the first installed
#   docker/engine.sh flags ENGINE  print global options ENGINE needs here
#                                  (nothing, except for podman on hosts below)
#   docker/engine.sh privileged ENGINE
#                                  print the `run` options of a privileged
#                                  container here: --privileged, except below
#
# podman on a host with hybrid cgroups (v1 controllers plus a cgroup2 mount at
# /sys/fs/cgroup/unified): its default runtime crun refuses to start containers
# ("cgroups in hybrid mode not supported"); runc works, so use it there.
# (podman's default ulimits above a host's hard limits cannot be fixed by a
# flag: see README, "Docker with podman".)
#
# Docker's --privileged asks for every capability it knows; where this host's
# bounding set lacks one (a host that is itself a container, e.g. without
# CAP_SYS_RESOURCE), runc fails with "unable to apply caps: operation not
# permitted". There the container gets what --privileged gives that the host
# can give: every capability of the bounding set, no seccomp or AppArmor
# profile, /proc and /sys paths unmasked. (Podman drops what the bounding set
# lacks by itself.) Read from this process's bounding set: a local daemon's.
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
privileged)
    engine=${2:?usage: $0 privileged ENGINE}
    bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status 2>/dev/null || true)
    last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || true)
    if is_podman "$engine" || [[ -z $bnd || -z $last ]] || (((0x$bnd & ((1 << (last + 1)) - 1)) == (1 << (last + 1)) - 1)); then
        echo --privileged
        exit 0
    fi
    # Capabilities 0-37 by number (those every Docker release since 20.10 knows).
    names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
        LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
        SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
        SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
        MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ)
    out=()
    for i in "${!names[@]}"; do
        (((0x$bnd >> i) & 1)) && out+=(--cap-add "${names[$i]}")
    done
    echo "${out[*]} --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined"
    ;;
*)
    echo "usage: $0 detect | flags ENGINE | privileged ENGINE" >&2
    exit 2
    ;;
esac

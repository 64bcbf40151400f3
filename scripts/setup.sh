#!/usr/bin/env bash
# Idempotent set-up for `make run` / `make test`: Debian packages the project
# needs (not the P4 toolchain itself: see README), then a virtualenv with the
# Python dependencies. Re-running does nothing when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev python3-thrift python3-six iproute2 iptables nftables ethtool iputils-ping procps gcc prometheus valgrind)
VENV=.venv
PYTHON=/usr/bin/python3  # Debian's python3: sees python3-thrift via system site-packages

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup: need root to apt-get install ${missing[*]} (run: sudo make setup)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Another apt (an unattended upgrade, a second set-up) may hold its locks: wait for it, up to 10 minutes.
    apt_wait() {
        local tries=0
        until "$@"; do
            tries=$((tries + 1))
            if ((tries >= 60)); then echo "setup: apt-get still failing after 10 minutes: $*" >&2; return 1; fi
            echo "setup: apt busy (another apt-get?); retrying in 10 s" >&2
            sleep 10
        done
    }
    apt_wait apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt_wait apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ ! -x $VENV/bin/python ]]; then
    echo "setup: creating $VENV on $PYTHON"
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi

stamp=$VENV/.installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    echo "setup: installing Python dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    touch "$stamp"
fi
echo "setup: ok ($VENV)"

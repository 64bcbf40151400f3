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
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
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

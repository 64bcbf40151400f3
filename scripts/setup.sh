#!/usr/bin/env bash
# Idempotent set-up for `make run` / `make test`: Debian packages the project
# needs (not the P4 toolchain itself: see README), then a virtualenv with the
# Python dependencies. Re-running does nothing when all is in place.
#
# The venv is isolated from Debian's Python packages (no --system-site-packages):
# every Python dependency, thrift included, comes from pyproject.toml at the
# versions tested there, whatever python3-* packages the machine has (Debian's
# python3-scapy 2.5 would otherwise satisfy `scapy` and shadow the version the
# project is tested on). BMv2's own Thrift modules (bm_runtime, sswitch_runtime)
# are not Python packages: emulator/toolchain.py finds them next to simple_switch_CLI.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-venv: the venv and its pip; python3-dev, gcc: C extensions pip builds from
# source (thrift's fastbinary). python3-thrift, python3-six: not for the venv, but for
# BMv2's Thrift CLI simple_switch_CLI, a #!/usr/bin/python3 script importing thrift
# (Debian's needs six), which `make doctor` requires and one runs by hand on a switch.
APT_PACKAGES=(python3 python3-venv python3-dev python3-thrift python3-six iproute2 iptables nftables ethtool iputils-ping procps gcc prometheus prometheus-alertmanager valgrind)
VENV=.venv
PYTHON=/usr/bin/python3  # Debian's python3; the venv sees none of its dist-packages

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

# A venv made by an earlier set-up with --system-site-packages is made again, isolated.
if [[ -f $VENV/pyvenv.cfg ]] && grep -Eiq '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
    echo "setup: $VENV sees Debian's Python packages (include-system-site-packages = true): recreating it"
    rm -rf "$VENV"
fi
if [[ ! -x $VENV/bin/python ]]; then
    echo "setup: creating $VENV on $PYTHON"
    rm -rf "$VENV"  # what is left of a venv whose python is gone
    "$PYTHON" -m venv "$VENV"
fi

stamp=$VENV/.installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    echo "setup: installing Python dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]"
    touch "$stamp"
fi
echo "setup: ok ($VENV)"

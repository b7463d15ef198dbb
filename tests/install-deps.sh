#!/usr/bin/env bash
# Installs the Debian packages the tests use as real peers and tools:
# OpenSSH (client and server), rsync and git (real clients through mn-ssh),
# the parallel shells multinode is compared with, both MPI stacks, the
# shells the helper is checked with, debootstrap for the cluster tests'
# base image, PyYAML for the k8s-* cluster tests (they read the manifests of
# docs/kubernetes.md), pip for py-spy (Python stacks in `multinode ps`; not
# a Debian package, so it comes from PyPI), paramiko (a real SSH client of
# Python's, for the python3 on PATH), maturin (it builds the wheel that
# tests/wheel.sh installs into a venv: python3-venv), PyPI's torch in a venv
# of the tests (target/test-venv: the job's store and gloo rendezvous with
# real torch), and cargo-nextest, which runs the Rust tests (from
# crates.io, built by `cargo install`: minutes, so only when
# `cargo nextest` is missing). Does nothing when all are present. Needs root
# (or sudo) only when a Debian package, py-spy, paramiko or maturin is missing.
set -euo pipefail

PACKAGES=(
    openssh-server openssh-client pdsh clustershell pssh
    openmpi-bin libopenmpi-dev mpich libmpich-dev
    shellcheck dash debootstrap hyperfine musl-tools
    iproute2 procps psmisc python3 python3-yaml gcc
    rsync git python3-pip python3-venv vim-tiny
)

# py-spy, paramiko and maturin from PyPI, after the Debian packages (pip is
# one of them).
py_spy() {
    local wanted=()
    command -v py-spy >/dev/null || wanted+=(py-spy)
    python3 -c 'import paramiko' 2>/dev/null || wanted+=(paramiko)
    command -v maturin >/dev/null || wanted+=(maturin)
    ((${#wanted[@]} > 0)) || return 0
    echo "test dependencies: installing ${wanted[*]} from PyPI"
    local sudo=()
    if ((EUID != 0)); then sudo=(sudo); fi
    "${sudo[@]}" python3 -m pip install --quiet --break-system-packages "${wanted[@]}" ||
        "${sudo[@]}" python3 -m pip install --quiet "${wanted[@]}"
}

# PyPI's torch (the default wheel; CPU and gloo are what the tests use) in a
# venv of the tests, target/test-venv (TEST_VENV to put it elsewhere; the
# tests read TEST_TORCH_PYTHON, else target/test-venv/bin/python): about
# 90 s and 5 GB once, nothing when it imports torch already. No root.
torch_venv() {
    local root venv
    root=$(cd "$(dirname "$0")/.." && pwd)
    venv=${TEST_VENV:-$root/target/test-venv}
    "$venv/bin/python" -c 'import torch' 2>/dev/null && return 0
    echo "test dependencies: installing torch from PyPI into $venv (about 90 s, 5 GB)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet torch numpy
}

# cargo-nextest from crates.io, into cargo's own bin directory (no root).
nextest() {
    cargo nextest --version >/dev/null 2>&1 && return 0
    echo "test dependencies: installing cargo-nextest from crates.io (cargo install, a few minutes)"
    cargo install --locked cargo-nextest
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    py_spy
    torch_venv
    nextest
    echo "test dependencies: all present"
    exit 0
fi
echo "test dependencies: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
# Package scripts must not start services (sshd): the tests start their own.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
fi
rc=0
{ "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; } || rc=$?
if ((made_policy)); then "${sudo[@]}" rm -f "$policy"; fi
((rc == 0)) && { py_spy || rc=$?; }
((rc == 0)) && { torch_venv || rc=$?; }
((rc == 0)) && { nextest || rc=$?; }
exit "$rc"

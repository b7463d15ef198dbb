#!/usr/bin/env bash
# The wheel, as a user installs it (issue 56): builds it
# (packaging/build-wheel.sh), installs the wheel file into a fresh venv with
# pip (no index: nothing else is fetched), and runs, from that venv only
# (PATH holds its bin and the system's, nothing of cargo's):
#   - `multinode --version`: the crate's version, which is the wheel's;
#   - a job on three loopback agents (127.0.56.1-3, the quickstart's sequence):
#     the head's job sources the helper and runs `exec_all`, `mn-exec-all`,
#     `mn-ssh` and the job's MULTINODE_SSH_WRAPPER (the venv's mn-ssh); one
#     worker is started by `python -m multinode agent`, and must be the
#     binary itself (exec), not a Python process;
#   - `multinode install-helper DIR` into a temporary root: helpers/generic-helper;
#   - `python -m multinode --help`, and an exit code passed through;
#   - `pip install --target DIR`: `python -m multinode` with DIR on PYTHONPATH;
#   - `pip uninstall -y multinode` removes multinode, mn-ssh and mn-exec-all.
# Prints one PASS or FAIL line a check and a verdict; exits 0 only when every
# check passed (1 otherwise, 2 on bad usage).
#
# Usage: tests/wheel.sh [WHEEL]
#   WHEEL  a wheel file to test as is (default: build one; MULTINODE_WHEEL
#          names one too)
# Environment: MN_WHEEL_PORT, the agents' port (default 29956).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[wheel %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
case ${1:-} in
-h | --help) sed -n '/^# Usage:/,/^# Environment/ s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
-*) echo "tests/wheel.sh: error: unknown option '$1' (see tests/wheel.sh --help)" >&2; exit 2 ;;
esac
wheel=${1:-${MULTINODE_WHEEL:-}}
# A given wheel, relative to the caller's directory.
[[ -z $wheel || $wheel == /* ]] || wheel=$PWD/$wheel
cd "$root"
port=${MN_WHEEL_PORT:-29956}
start=$SECONDS

failures=0
pass() { printf 'PASS  %s\n' "$1"; }
fail() { printf 'FAIL  %s\n' "$1"; failures=$((failures + 1)); }
check_eq() { # NAME WANT GOT
    if [[ $2 == "$3" ]]; then pass "$1"; else fail "$1: want '$2', got '$3'"; fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/multinode-wheel-test.XXXXXX")
agents=()
cleanup() {
    local pid
    for pid in "${agents[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${agents[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

version=$(cargo metadata --offline --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "multinode"))')
if [[ -z $wheel ]]; then
    t=$SECONDS
    wheel=$(packaging/build-wheel.sh --out "$tmp/wheels") || { fail "packaging/build-wheel.sh"; wheel=; }
    [[ -n $wheel ]] && pass "packaging/build-wheel.sh built $(basename "$wheel") in $((SECONDS - t))s"
fi
if [[ -z $wheel || ! -f $wheel ]]; then
    fail "a wheel file (${wheel:-none})"
    echo "wheel: FAILED (no wheel to test)"
    exit 1
fi
size=$(stat -c %s "$wheel")
log "testing $wheel ($size bytes)"
case $(basename "$wheel") in
multinode-"$version"-py3-none-*manylinux*musllinux*.whl) pass "wheel name: version $version, manylinux and musllinux tags" ;;
*) fail "wheel name $(basename "$wheel"): want multinode-$version-py3-none-...manylinux...musllinux..." ;;
esac
# One binary: the two aliases are scripts of a few hundred bytes.
contents=$(python3 - "$wheel" <<'PY'
import sys, zipfile
for i in zipfile.ZipFile(sys.argv[1]).infolist():
    print(i.filename, i.file_size)
PY
)
check_eq "the wheel's aliases are small scripts, one binary in all" "mn-exec-all:small mn-ssh:small multinode" \
    "$(awk '/\.data\/scripts\// { n = $1; sub(/.*\//, "", n); print n (n == "multinode" ? "" : ($2 < 4096 ? ":small" : ":" $2)) }' <<<"$contents" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')"

venv=$tmp/venv
python3 -m venv "$venv" || { fail "python3 -m venv (install python3-venv)"; exit 1; }
if pip_out=$("$venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check "$wheel" 2>&1); then
    pass "pip install $(basename "$wheel") into a fresh venv"
else
    fail "pip install: $(tail -n 3 <<<"$pip_out" | tr '\n' ' ')"
fi
# The venv only: no other multinode (~/.cargo/bin, /usr/local/bin) may be found.
export PATH=$venv/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset MULTINODE_BIN MULTINODE_SSH_WRAPPER
for name in multinode mn-ssh mn-exec-all; do
    check_eq "$name on PATH is the venv's" "$venv/bin/$name" "$(command -v "$name" || true)"
done

check_eq "multinode --version" "multinode $version" "$(multinode --version 2>&1)"
check_eq "mn-exec-all --version" "mn-exec-all $version" "$(mn-exec-all --version 2>&1)"

# install-helper into a temporary root.
out=$(multinode install-helper "$tmp/helper-root/multinode" 2>&1) || true
check_eq "multinode install-helper DIR" "$tmp/helper-root/multinode/generic-helper: installed" "$out"
if cmp -s "$tmp/helper-root/multinode/generic-helper" helpers/generic-helper; then
    pass "the installed helper is helpers/generic-helper"
else
    fail "the installed helper differs from helpers/generic-helper"
fi

# python -m multinode: the binary, exec'd, its exit code passed through.
help=$(python -m multinode --help 2>&1) && rc=0 || rc=$?
check_eq "python -m multinode --help: exit code" 0 "$rc"
check_eq "python -m multinode --help: multinode's usage" "Usage: multinode [OPTIONS] <COMMAND>" \
    "$(grep -m1 '^Usage:' <<<"$help" || true)"
python -m multinode hosts --no-such-option >/dev/null 2>&1 && rc=0 || rc=$?
check_eq "python -m multinode with a bad option: multinode's exit code" 2 "$rc"

# A job on three loopback agents, as the quickstart runs one: the head
# (rank 0) runs job.sh, which sources the installed helper.
hosts=(127.0.56.1 127.0.56.2 127.0.56.3)
export MULTINODE_SECRET
MULTINODE_SECRET=$(head -c 32 /dev/urandom | base64)
export MULTINODE_HOSTLIST="${hosts[0]}:1,${hosts[1]}:1,${hosts[2]}:1"
export MULTINODE_AGENT_PORT=$port
mkdir -p "$tmp/job"
cat >"$tmp/job/job.sh" <<JOB
#!/bin/sh
. "$tmp/helper-root/multinode/generic-helper" || exit
echo "wrapper \$MULTINODE_SSH_WRAPPER"
exec_all -c 'echo "exec_all rank \$RANK"' || exit
mn-exec-all -c 'echo "mn-exec-all rank \$RANK"' || exit
mn-ssh ${hosts[2]} 'echo "mn-ssh rank \$RANK"' || exit
"\$MULTINODE_SSH_WRAPPER" ${hosts[1]} echo "wrapper reached ${hosts[1]}"
JOB
chmod +x "$tmp/job/job.sh"
cd "$tmp/job"
MULTINODE_NODE_RANK=1 multinode agent --listen "${hosts[1]}:$port" -- ./job.sh >"$tmp/agent1.out" 2>&1 &
agents+=($!)
MULTINODE_NODE_RANK=2 python -m multinode agent --listen "${hosts[2]}:$port" -- ./job.sh >"$tmp/agent2.out" 2>&1 &
agents+=($!)
sleep 0.5
check_eq "python -m multinode agent is the binary itself (exec)" "$venv/bin/multinode" \
    "$(readlink "/proc/${agents[1]}/exe" 2>/dev/null || echo gone)"
t=$SECONDS
MULTINODE_NODE_RANK=0 timeout 60 multinode agent --listen "${hosts[0]}:$port" -- ./job.sh >"$tmp/head.out" 2>&1 && rc=0 || rc=$?
cd "$root"
check_eq "the head's job: exit code" 0 "$rc"
got=$(sort "$tmp/head.out")
want=$(sort <<EOF
wrapper $venv/bin/mn-ssh
exec_all rank 0
exec_all rank 1
exec_all rank 2
mn-exec-all rank 0
mn-exec-all rank 1
mn-exec-all rank 2
mn-ssh rank 2
wrapper reached ${hosts[1]}
EOF
)
if [[ $got == "$want" ]]; then
    pass "the job through exec_all, mn-exec-all, mn-ssh and MULTINODE_SSH_WRAPPER ($((SECONDS - t))s)"
else
    fail "the job's output differs: $(diff <(echo "$want") <(echo "$got") | tr '\n' ' ')"
fi
for i in 0 1; do
    pid=${agents[i]}
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    wait "$pid" && rc=0 || rc=$?
    check_eq "worker rank $((i + 1)) released: exit code" 0 "$rc"
done
agents=()
if ((failures > 0)); then
    for f in head agent1 agent2; do sed "s/^/  $f | /" "$tmp/$f.out"; done
fi

# pip uninstall removes all three.
if "$venv/bin/python" -m pip uninstall -y --disable-pip-version-check multinode >/dev/null 2>&1; then
    pass "pip uninstall -y multinode"
else
    fail "pip uninstall -y multinode"
fi
left=
for name in multinode mn-ssh mn-exec-all; do
    if [[ -e $venv/bin/$name ]]; then left+="$name "; fi
done
check_eq "uninstalled: nothing of multinode left in the venv's bin" "" "$left"
if python -c 'import multinode' 2>/dev/null; then
    fail "the multinode package is still importable"
else
    pass "the multinode package is gone"
fi

# pip install --target DIR (after the uninstall: the venv's bin has no
# multinode to fall back on): the three names in DIR/bin; python -m
# multinode with DIR on PYTHONPATH finds the binary there.
if "$venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check \
    --target "$tmp/target" "$wheel" >/dev/null 2>&1; then
    check_eq "pip install --target DIR: python -m multinode --version" "multinode $version" \
        "$(PYTHONPATH=$tmp/target python -m multinode --version 2>&1)"
    check_eq "pip install --target DIR: DIR/bin/mn-exec-all --version" "mn-exec-all $version" \
        "$("$tmp/target/bin/mn-exec-all" --version 2>&1)"
else
    fail "pip install --target DIR"
fi

if ((failures > 0)); then
    echo "wheel: FAILED ($failures checks failed, $((SECONDS - start))s)"
    exit 1
fi
echo "wheel: passed ($(basename "$wheel"), $size bytes, $((SECONDS - start))s)"

#!/usr/bin/env bash
# Builds the multinode wheel: the static musl `multinode` binary (release
# profile: stripped, fat LTO), the `mn-ssh` and `mn-exec-all` scripts and the
# `multinode` package (`python -m multinode`), by maturin (pyproject.toml).
# A static binary runs on glibc and musl systems alike, so the wheel is
# tagged for both: manylinux2014 and musllinux_1_1.
#
# Usage: packaging/build-wheel.sh [--target TRIPLE] [--zig] [--out DIR]
#   --target TRIPLE  the Rust target (default x86_64-unknown-linux-musl;
#                    aarch64-unknown-linux-musl needs --zig here)
#   --zig            link with zig (the ziglang package from PyPI): a cross
#                    linker for another architecture
#   --out DIR        where the wheel goes (default target/wheels)
# Prints the wheel's path as the last line of stdout; the rest (cargo's
# output, the wheel's size and contents) goes to stderr.
#
# maturin (and ziglang for --zig) come from PyPI into a venv of the script's
# own, target/maturin-venv, when `maturin` is not on PATH (MATURIN=PATH names
# one). The rustup target is added when missing. Exits 2 on bad usage, 1
# when the build fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

log() { printf '[build-wheel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'build-wheel: error: %s\n' "$*" >&2; exit "${2:-1}"; }
usage() { sed -n '/^# Usage:/,/^# Prints/ s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

target=x86_64-unknown-linux-musl
zig=0
out=$root/target/wheels
while (($# > 0)); do
    case $1 in
    --target) (($# >= 2)) || die "--target needs a value (for example aarch64-unknown-linux-musl)" 2
        target=$2; shift 2 ;;
    --zig) zig=1; shift ;;
    --out) (($# >= 2)) || die "--out needs a directory" 2
        out=$2; shift 2 ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (see packaging/build-wheel.sh --help)" 2 ;;
    esac
done
[[ $target == *-linux-musl* ]] ||
    die "--target $target: the wheel holds a static binary; give a *-unknown-linux-musl target" 2

start=$SECONDS
venv=$root/target/maturin-venv
maturin=${MATURIN:-}
if [[ -z $maturin ]] && ((zig == 0)); then maturin=$(command -v maturin || true); fi
if [[ -z $maturin ]]; then
    # The script's own venv: maturin, and ziglang for --zig (maturin runs
    # `python3 -m ziglang` when no `zig` is on PATH: the venv's, first on PATH).
    maturin=$venv/bin/maturin
    wanted=()
    [[ -x $maturin ]] || wanted+=(maturin)
    if ((zig)) && ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then wanted+=(ziglang); fi
    if ((${#wanted[@]} > 0)); then
        log "installing ${wanted[*]} from PyPI into $venv"
        [[ -x $venv/bin/python ]] || python3 -m venv "$venv" ||
            die "cannot create a venv (python3 -m venv): install python3-venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${wanted[@]}" ||
            die "cannot install ${wanted[*]} from PyPI"
    fi
    export PATH=$venv/bin:$PATH
fi
log "$("$maturin" --version)"

if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    log "adding the rustup target $target"
    rustup target add "$target" >&2 || die "cannot add the rustup target $target"
fi

mkdir -p "$out"
before=$(mktemp "${TMPDIR:-/tmp}/multinode-wheel.XXXXXX")
trap 'rm -f "$before"' EXIT
ls "$out" >"$before"
args=(build --release --locked --target "$target" --out "$out"
    --compatibility manylinux2014 musllinux_1_1)
((zig)) && args+=(--zig)
log "maturin ${args[*]}"
"$maturin" "${args[@]}" >&2 || die "maturin build failed"

version=$(cargo metadata --offline --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "multinode"))')
arch=${target%%-*}
wheel=$(find "$out" -maxdepth 1 -name "multinode-$version-*_$arch.whl" -newer "$before" | head -n 1)
[[ -n $wheel ]] || wheel=$(find "$out" -maxdepth 1 -name "multinode-$version-*_$arch.whl" | head -n 1)
[[ -n $wheel ]] || die "maturin wrote no multinode-$version wheel for $arch into $out"
log "built $(basename "$wheel"): $(stat -c %s "$wheel") bytes, in $((SECONDS - start))s"
python3 -m zipfile -l "$wheel" >&2
echo "$wheel"

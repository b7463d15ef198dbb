#!/usr/bin/env bash
# Builds the multinode image (default tag multinode:test) from the repository's
# Dockerfile, with no registry:
#   1. a release build of the binary: static musl when the target
#      x86_64-unknown-linux-musl is installed or installable, else glibc (which
#      runs on bookworm, the base);
#   2. the base image multinode-base:bookworm (docker/build-base-image.sh; a
#      no-op when it is up to date);
#   3. a staging folder holding only the binary and helpers/generic-helper, as
#      the build context;
#   4. docker build -t TAG -f Dockerfile STAGING.
#
# Environment:
#   MULTINODE_IMAGE  tag to build (default multinode:test)
#   MULTINODE_BIN    a binary to use as is (skips cargo)
#   MULTINODE_BASE_IMAGE  the base image's tag (default multinode-base:bookworm;
#                    built by docker/build-base-image.sh when out of date)
#   MULTINODE_MUSL   0: build for glibc even when musl is available
#   CARGO_BUILD_JOBS and the other cargo variables are honoured.
set -euo pipefail

IMAGE=${MULTINODE_IMAGE:-multinode:test}
MUSL_TARGET=x86_64-unknown-linux-musl

log() { printf '[build-image %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'build-image: error: %s\n' "$*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
start=$SECONDS

stage=$(mktemp -d "${TMPDIR:-/tmp}/multinode-image.XXXXXX")
trap 'rm -rf "$stage"' EXIT

musl_available() {
    [[ ${MULTINODE_MUSL:-1} != 0 ]] || return 1
    command -v rustup >/dev/null || return 1
    if rustup target list --installed 2>/dev/null | grep -qx "$MUSL_TARGET"; then
        return 0
    fi
    log "adding the rustup target $MUSL_TARGET"
    rustup target add "$MUSL_TARGET" >&2 || {
        log "cannot add $MUSL_TARGET; falling back to the glibc build"
        return 1
    }
}

if [[ -n ${MULTINODE_BIN:-} ]]; then
    bin=$MULTINODE_BIN
    [[ -x $bin ]] || die "MULTINODE_BIN=$bin is not an executable file"
    kind="given (MULTINODE_BIN)"
elif musl_available; then
    # Without the default feature (the alias binaries, which the image does
    # not use), as packaging/build-wheel.sh builds it: the two share one build.
    log "cargo build --release --target $MUSL_TARGET --bin multinode --no-default-features"
    cargo build --release --target "$MUSL_TARGET" --bin multinode --no-default-features
    bin=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$MUSL_TARGET/release/multinode
    kind="static (musl)"
else
    log "cargo build --release --bin multinode --no-default-features"
    cargo build --release --bin multinode --no-default-features
    bin=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/multinode
    kind="dynamic (glibc)"
fi
log "binary: $bin, $kind, $(stat -c %s "$bin") bytes"

"$here/build-base-image.sh"

install -m 0755 "$bin" "$stage/multinode"
install -m 0644 helpers/generic-helper "$stage/generic-helper"

# Without the buildx plugin, the docker CLI needs DOCKER_BUILDKIT=0 to use the
# engine's own builder; either builder finds the local base image and pulls
# nothing.
if ! docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=0
fi
version=$("$bin" --version 2>/dev/null | awk '{ print $2 }') || version=unknown
old_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
log "docker build -t $IMAGE -f Dockerfile <staging: multinode, generic-helper>"
docker build --force-rm -t "$IMAGE" -f Dockerfile \
    --build-arg "BASE=${MULTINODE_BASE_IMAGE:-multinode-base:bookworm}" \
    --label "org.multinode.version=$version" \
    --label "org.multinode.binary=$kind" \
    "$stage"
id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
if [[ -n $old_id && $old_id != "$id" ]]; then
    # The image this tag named before (kept with MN_KEEP_IMAGE=1), now
    # untagged; kept if a container still uses it.
    docker rmi "$old_id" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
log "built $IMAGE (${id:7:12}, $((size / 1000000)) MB, multinode $version, $kind binary) in $((SECONDS - start))s"

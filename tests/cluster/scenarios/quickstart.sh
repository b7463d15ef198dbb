#!/usr/bin/env bash
# docs/quickstart.md as a newcomer runs it, in a fresh container of the image
# (with no network but loopback). The page's blocks are extracted
# (mn_doc_block), so this breaks when the page and the program part ways:
# - quickstart-install: every line runs as written, on a machine that has the
#   binary but no /multinode (removed first), except `cargo install`, which
#   the image's binary stands for; the container's user is root and it has
#   no `sudo`, as root containers often do not. /multinode/generic-helper
#   must then be the repository's helpers/generic-helper;
# - quickstart-dockerfile: the page's lines for a user's own image, after a
#   FROM of the base image and with the test image's binary as the build
#   context: the image has the two names and /multinode/generic-helper;
# - quickstart-demo and quickstart-demo-label: the `$ ` lines run as
#   written; the output must be the page's lines, in any order;
# - quickstart-install-denied: the same command as a user who may not write
#   /multinode prints the page's message and exits 2;
# - quickstart-job.sh is saved as job.sh in an empty directory, and the `$ `
#   lines of quickstart-one-machine run there, as written, in one bash; the
#   output must be the page's output lines (in any order: the nodes print
#   concurrently), and every agent must have exited.
# shellcheck disable=SC2016 # single-quoted scripts run in the container's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

page=$MN_ROOT/docs/quickstart.md
mkdir -p "$MN_TMP/page"
mn_doc_block "$page" quickstart-install >"$MN_TMP/install.sh"
mn_doc_block "$page" quickstart-install-denied >"$MN_TMP/denied.console"
mn_doc_block "$page" quickstart-job.sh >"$MN_TMP/page/job.sh"
mn_doc_block "$page" quickstart-one-machine >"$MN_TMP/one-machine.console"
cp "$MN_ROOT/helpers/generic-helper" "$MN_TMP/page/generic-helper.want"

for block in quickstart-demo quickstart-demo-label; do
    mn_doc_block "$page" "$block" >"$MN_TMP/$block.console"
    sed -n 's/^\$ //p' "$MN_TMP/$block.console" >"$MN_TMP/page/$block.sh"
    grep -v '^\$ ' "$MN_TMP/$block.console" | sort >"$MN_TMP/$block.want"
done
grep -v '^cargo install ' "$MN_TMP/install.sh" >"$MN_TMP/page/install.sh"
check_eq "install block: one 'cargo install' line, stood for by the image's binary" 1 \
    "$(grep -c '^cargo install ' "$MN_TMP/install.sh" || true)"
sed -n 's/^\$ //p' "$MN_TMP/denied.console" >"$MN_TMP/page/denied.sh"
grep -v '^\$ ' "$MN_TMP/denied.console" >"$MN_TMP/denied.want"
sed -n 's/^\$ //p' "$MN_TMP/one-machine.console" >"$MN_TMP/page/one-machine.sh"
grep -v '^\$ ' "$MN_TMP/one-machine.console" | sort >"$MN_TMP/one-machine.want"

rc=0
# --init: a PID 1 that reaps, as a login shell would (the workers exit after
# the bash that started them).
mn_docker --rm --init --network none -v "$MN_TMP/page:/page:ro" "$MN_IMAGE" timeout 150 bash -c '
    for block in quickstart-demo quickstart-demo-label; do
        bash /page/$block.sh >/tmp/$block.out 2>&1
        echo "$block-rc=$?"
        sed "s/^/$block: /" /tmp/$block.out
    done
    rm -rf /multinode
    # A user who may not write /multinode, then root.
    setpriv --reuid=65534 --regid=65534 --clear-groups bash /page/denied.sh \
        >/tmp/denied.out 2>&1
    echo "denied-rc=$?"
    sed "s/^/denied: /" /tmp/denied.out
    bash -e /page/install.sh 2>&1 | sed "s/^/install: /"
    if cmp -s /multinode/generic-helper /page/generic-helper.want; then
        echo "helper=same"
    else
        echo "helper=differs"
    fi
    echo "helper-mode=$(stat -c %a /multinode/generic-helper)"
    mkdir /tmp/try && cd /tmp/try && cp /page/job.sh job.sh
    bash /page/one-machine.sh >/tmp/one-machine.out 2>&1
    echo "sequence-rc=$?"
    sed "s/^/out: /" /tmp/one-machine.out
    # The workers were started with & by that bash: they must be gone too
    # (every process named multinode: the agents, their keepers, supervise).
    for i in $(seq 50); do pgrep -x multinode >/dev/null || break; sleep 0.1; done
    echo "agents-left=$(pgrep -xc multinode)"
' >"$MN_TMP/run.out" 2>&1 || rc=$?
check_eq "container exit" 0 "$rc"
fact() { sed -n "s/^$1=//p" "$MN_TMP/run.out"; }

for block in quickstart-demo quickstart-demo-label; do
    check_eq "$block: exit status" 0 "$(fact "$block-rc")"
    sed -n "s/^$block: //p" "$MN_TMP/run.out" | sort >"$MN_TMP/$block.got"
    if cmp -s "$MN_TMP/$block.want" "$MN_TMP/$block.got"; then
        check_ok "$block: the page's $(wc -l <"$MN_TMP/$block.want") output lines"
    else
        check_fail "$block: output differs from the page: $(diff "$MN_TMP/$block.want" "$MN_TMP/$block.got" | tr '\n' ' ')"
    fi
done
check_eq "install-helper without write access: exit code" 2 "$(fact denied-rc)"
check_eq "install-helper without write access: the page's message" \
    "$(cat "$MN_TMP/denied.want")" "$(sed -n 's/^denied: //p' "$MN_TMP/run.out")"
check_eq "install block's output" "/multinode/generic-helper: installed" \
    "$(sed -n 's/^install: //p' "$MN_TMP/run.out")"
check_eq "/multinode/generic-helper is helpers/generic-helper" same "$(fact helper)"
check_eq "/multinode/generic-helper mode" 644 "$(fact helper-mode)"
check_eq "one-machine sequence: bash's exit status" 0 "$(fact sequence-rc)"
sed -n 's/^out: //p' "$MN_TMP/run.out" | sort >"$MN_TMP/one-machine.got"
if cmp -s "$MN_TMP/one-machine.want" "$MN_TMP/one-machine.got"; then
    check_ok "one-machine sequence: the page's $(wc -l <"$MN_TMP/one-machine.want") output lines"
else
    check_fail "one-machine sequence: output differs from the page: $(diff "$MN_TMP/one-machine.want" "$MN_TMP/one-machine.got" | tr '\n' ' ')"
fi
check_eq "agents left after the sequence" 0 "$(fact agents-left)"

# The page's Dockerfile lines on a user's image (here the base image). The
# image built is the scenario's own, removed when it ends.
ctx=$MN_TMP/image
mkdir -p "$ctx"
user_image=mn-quickstart-user:$MN_RUN_ID
trap 'docker rmi -f "$user_image" >/dev/null 2>&1 || true' EXIT
cid=$(docker create --label "$MN_LABEL" "$MN_IMAGE" true)
docker cp "$cid:/usr/local/bin/multinode" "$ctx/multinode"
docker rm "$cid" >/dev/null
{
    echo "FROM ${MULTINODE_BASE_IMAGE:-multinode-base:bookworm}"
    mn_doc_block "$page" quickstart-dockerfile
} >"$ctx/Dockerfile"
rc=0
docker build -q -t "$user_image" "$ctx" >"$MN_TMP/user-image.out" 2>&1 || rc=$?
check_eq "docker build with the page's Dockerfile lines" 0 "$rc"
if ((rc == 0)); then
    layout=$(mn_docker --rm --network none -v "$MN_TMP/page:/page:ro" "$user_image" sh -c '
        echo "$(readlink /usr/local/bin/mn-ssh) $(readlink /usr/local/bin/mn-exec-all)"
        cmp -s /multinode/generic-helper /page/generic-helper.want && echo helper=same
    ' 2>&1 | tr '\n' ' ')
    check_eq "the user's image: mn-ssh, mn-exec-all links, the helper" \
        "multinode multinode helper=same " "$layout"
else
    sed 's/^/  | /' "$MN_TMP/user-image.out"
fi
finish

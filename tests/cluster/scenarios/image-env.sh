#!/usr/bin/env bash
# The image itself, and `multinode env` in a container on a private network:
# - `multinode --version` is the crate's version;
# - mn-ssh and mn-exec-all are symlinks to the binary, which dispatches on
#   argv[0] (`mn-exec-all --version` answers as mn-exec-all);
# - /multinode/generic-helper is installed;
# - `multinode env --hosts "$(hostname)":1 --format json` prints one JSON
#   object with MULTINODE_HOSTLIST = HOSTNAME:1, and MULTINODE_NODE_IP, when
#   given, is the container's own address, never a loopback one.
# shellcheck disable=SC2016 # single-quoted scripts run in the container's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# One container for the layout checks: one line a fact.
mn_docker --rm --network none "$MN_IMAGE" sh -c '
    echo "version=$(multinode --version 2>&1)"
    echo "alias=$(mn-exec-all --version 2>&1)"
    echo "mn-ssh=$(readlink /usr/local/bin/mn-ssh)"
    echo "mn-exec-all=$(readlink /usr/local/bin/mn-exec-all)"
    echo "helper=$(test -f /multinode/generic-helper && echo present || echo missing)"
' >"$MN_TMP/layout"
fact() { sed -n "s/^$1=//p" "$MN_TMP/layout"; }
check_eq "multinode --version" "multinode $MN_CRATE_VERSION" "$(fact version)"
check_eq "mn-exec-all --version (argv[0] dispatch)" "mn-exec-all $MN_CRATE_VERSION" "$(fact alias)"
check_eq "/usr/local/bin/mn-ssh links to" multinode "$(fact mn-ssh)"
check_eq "/usr/local/bin/mn-exec-all links to" multinode "$(fact mn-exec-all)"
check_eq "/multinode/generic-helper" present "$(fact helper)"

# `multinode env` on a network of the test's own. stdout is the JSON alone;
# the container's address (from the /etc/hosts Docker wrote) goes to stderr.
net=$(mn_network env)
host=node0
rc=0
mn_docker --rm --network "$net" --hostname "$host" "$MN_IMAGE" sh -c '
    multinode env --hosts "$(hostname)":1 --format json; rc=$?
    echo "mn-test-ip=$(hostname -i)" >&2
    exit $rc
' >"$MN_TMP/env.json" 2>"$MN_TMP/env.err" || rc=$?
if ((rc != 0)); then
    check_fail "multinode env exited $rc: $(grep -v '^mn-test-ip=' "$MN_TMP/env.err" | head -n 1)"
    finish
fi
ips=$(sed -n 's/^mn-test-ip=//p' "$MN_TMP/env.err")

check_lines < <(python3 - "$MN_TMP/env.json" "$host:1" "$ips" <<'PY'
import ipaddress, json, sys
path, want_hostlist, container_ips = sys.argv[1:]
container_ips = container_ips.split()  # `hostname -i`: one or more addresses
try:
    env = json.load(open(path))
except ValueError as e:
    print(f"fail env output is not JSON: {e}")
    sys.exit()
if not isinstance(env, dict):
    print(f"fail env JSON is a {type(env).__name__}, not an object")
    sys.exit()
print("ok env output parses as one JSON object")
got = env.get("MULTINODE_HOSTLIST")
if got == want_hostlist:
    print(f"ok MULTINODE_HOSTLIST: {got}")
else:
    print(f"fail MULTINODE_HOSTLIST: want {want_hostlist!r}, got {got!r}")
node_ip = env.get("MULTINODE_NODE_IP")
if node_ip is not None:
    try:
        loopback = ipaddress.ip_address(str(node_ip)).is_loopback
    except ValueError:
        loopback = None
    if loopback is None:
        print(f"fail MULTINODE_NODE_IP is not an address: {node_ip!r}")
    elif loopback:
        print(f"fail MULTINODE_NODE_IP is a loopback address: {node_ip}")
    elif str(node_ip) not in container_ips:
        print(f"fail MULTINODE_NODE_IP: want the container's {' or '.join(container_ips)}, got {node_ip}")
    else:
        print(f"ok MULTINODE_NODE_IP: {node_ip} (the container's address)")
PY
)
finish

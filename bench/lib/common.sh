# Sourced by the bench scripts. Everything this bench creates lives under
# $BENCH_STATE and is named so that teardown.sh can remove exactly that.
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
BENCH_STATE=${BENCH_STATE:-${TMPDIR:-/tmp}/mn-bench}
# The peers' sshd (one for all "nodes") and the agents' port (one agent per node address).
SSHD_PORT=${BENCH_SSHD_PORT:-2222}
AGENT_PORT=${BENCH_AGENT_PORT:-29990}
# Remote login user of the peers: a dedicated user with an empty home.
BENCH_USER=${BENCH_USER:-mnbench}
# The nft table and the cpuacct groups (NAME_sshd, NAME_agents, NAME_relays):
# two benches at once on one machine need their own BENCH_NAME (and their
# own BENCH_STATE and ports), or each counts and removes the other's.
BENCH_NAME=${BENCH_NAME:-mn_bench}
NFT_TABLE=$BENCH_NAME
export BENCH_DIR REPO BENCH_STATE SSHD_PORT AGENT_PORT BENCH_USER NFT_TABLE BENCH_NAME

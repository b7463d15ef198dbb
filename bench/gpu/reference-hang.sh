# shellcheck shell=sh
# bench/gpu/reference.sh (the reference multi-node script) with exec_all's
# diagnosis options: --timeout MN_TIMEOUT (default 60), its snapshot, and a
# report at MN_REPORT. /workspace/train.py is bench/gpu/hang.py.
# shellcheck source=helpers/generic-helper
. helpers/generic-helper
# Number of nodes = entries in the hostlist.
NNODES=$(echo "$MULTINODE_HOSTLIST_NOSLOTS" | awk -F, '{print NF}')
# Run torchrun on every node. Each node takes its --node-rank from $RANK;
# all rendezvous at the head node ($1 == MULTINODE_NODE_IP).
exec_all --timeout "${MN_TIMEOUT:-60}" --snapshot-on-timeout --report "${MN_REPORT:-/tmp/report.json}" \
    - "$MULTINODE_NODE_IP" "$NNODES" <<'EOF2'
torchrun \
  --nnodes="$2" \
  --node-rank="$RANK" \
  --nproc-per-node=1 \
  --master-addr="$1" \
  --master-port=29500 \
  /workspace/train.py
EOF2

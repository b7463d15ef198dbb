# The reference document's multi-node script, verbatim but for two things the
# 2-GPU machine needs: the helper's path in this repository, and
# --nproc-per-node=1 (one GPU per "node"). /workspace/train.py is the
# reference all-reduce program (bench/gpu/allreduce.py).
# shellcheck source=helpers/generic-helper
. helpers/generic-helper
# Number of nodes = entries in the hostlist.
NNODES=$(echo "$MULTINODE_HOSTLIST_NOSLOTS" | awk -F, '{print NF}')
# Run torchrun on every node. Each node takes its --node-rank from $RANK;
# all rendezvous at the head node ($1 == MULTINODE_NODE_IP).
exec_all - "$MULTINODE_NODE_IP" "$NNODES" <<'EOF'
torchrun \
  --nnodes="$2" \
  --node-rank="$RANK" \
  --nproc-per-node=1 \
  --master-addr="$1" \
  --master-port=29500 \
  /workspace/train.py
EOF

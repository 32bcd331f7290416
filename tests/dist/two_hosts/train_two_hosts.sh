#!/usr/bin/env bash
# train_two_hosts.sh TESSERA_TRAIN: tessera-train with 2 ranks, one on each of two hosts (network
# namespaces, two_hosts.sh: hostfile, plm_rsh_agent, TCP only), against one process with the
# global batch, the same seed and data: the weights after 6 steps agree within a normalised error
# of 1e-5, and rank 0 alone printed the closing line. Exit 77 (skipped) where two_hosts.sh can not
# make the hosts.
set -euo pipefail
train=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model mlp --accelerator cpu --epochs 1 --limit-train-batches 6 --limit-test-batches 4
        --seed 5)
status=0
"$here/two_hosts.sh" --timeout 200 -- "$train" "${common[@]}" --num-nodes 2 --batch-size 32 \
  --save-weights "$dir/ddp.safetensors" >"$dir/out" 2>"$dir/err" || status=$?
cat "$dir/out"
cat "$dir/err" >&2
((status == 0)) || exit "$status"
closing=$(grep -c '^Test accuracy: ' "$dir/out" || true)
if [[ "$closing" != 1 ]]; then
  echo "train_two_hosts.sh: $closing closing lines, expected rank 0's alone" >&2
  exit 1
fi
"$train" "${common[@]}" -q --batch-size 64 --save-weights "$dir/one.safetensors" >/dev/null
python3 "$here/../compare_weights.py" "$dir/ddp.safetensors" "$dir/one.safetensors" 1e-5

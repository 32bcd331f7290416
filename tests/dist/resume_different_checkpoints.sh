#!/usr/bin/env bash
# resume_different_checkpoints.sh EXPECT_JOB_ENDS MPIRUN TESSERA_TRAIN: ranks that find different
# checkpoints (a stale copy on one machine: here each rank its own directory, through mpirun's
# MPMD form) stop at once with an error naming the checkpoint, instead of waiting on each other.
set -euo pipefail
expect=$1
mpirun=$2
train=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model mlp --accelerator cpu -q --batch-size 16 --limit-train-batches 4
        --limit-test-batches 2)
"$train" "${common[@]}" --epochs 1 --checkpoint-dir "$dir/a"
mkdir -p "$dir/b" && cp "$dir"/a/*.safetensors "$dir/b/"
"$train" "${common[@]}" --epochs 2 --resume --checkpoint-dir "$dir/a"
"$expect" 20 "tessera: rank [01] \(host [^)]+\) failed: .*the ranks resumed from different checkpoints" \
  "$mpirun" --oversubscribe --bind-to none -np 1 "$train" "${common[@]}" --epochs 3 --resume --checkpoint-dir "$dir/a" : \
  -np 1 "$train" "${common[@]}" --epochs 3 --resume --checkpoint-dir "$dir/b"

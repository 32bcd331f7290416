#!/usr/bin/env bash
# train_equal.sh TESSERA_TRAIN RANKS MODEL [weights|accuracy]: tessera-train --devices RANKS (it
# starts mpirun itself) against one process with the global batch, the same seed and data:
#   weights: after 6 steps within a normalised error of 1e-5 (mlp, or the reduced gpt without
#   dropout); accuracy (mlp): the test accuracy after one whole epoch within 0.3 points, under a
#   OneCycle schedule whose last learning rate is the one-process run's (the schedule's length is
#   counted on each process's share of the epoch).
set -euo pipefail
train=$1
ranks=$2
model=$3
what=${4:-weights}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(dirname "$0")
if [ "$model" = gpt ]; then
  common=(--model gpt --accelerator cpu -q --max-steps 6 --val-every 6 --limit-test-batches 2
          --layers 2 --heads 2 --width 32 --context 32 --dropout 0 --sample-chars 0)
  per_rank=8
else
  common=(--model mlp --accelerator cpu -q --epochs 1 --limit-train-batches 6
          --limit-test-batches 4)
  per_rank=32
fi
if [ "$what" = weights ]; then
  "$train" "${common[@]}" --devices "$ranks" --batch-size "$per_rank" --save-weights "$dir/ddp.safetensors"
  "$train" "${common[@]}" --batch-size $((per_rank * ranks)) --save-weights "$dir/one.safetensors"
  python3 "$here/compare_weights.py" "$dir/ddp.safetensors" "$dir/one.safetensors" 1e-5
  exit 0
fi
[ "$what" = accuracy ] && [ "$model" = mlp ] || { echo "train_equal.sh: accuracy is for mlp" >&2; exit 2; }

# One whole epoch: the test accuracies agree within 0.3 points, and the schedules end at the same
# learning rate (the metrics CSV's last row, column 3), within a relative 1e-6.
acc() { sed -n 's/^Test accuracy: \([0-9.]*\)%.*/\1/p' <<<"$1"; }
last_lr() { tail -n 1 "$1" | cut -d, -f3; }
full=(--model mlp --accelerator cpu -q --epochs 1 --scheduler onecycle)
a=$(acc "$("$train" "${full[@]}" --devices "$ranks" --batch-size 64 --metrics "$dir/ddp.csv")")
b=$(acc "$("$train" "${full[@]}" --batch-size $((64 * ranks)) --metrics "$dir/one.csv")")
lr_a=$(last_lr "$dir/ddp.csv")
lr_b=$(last_lr "$dir/one.csv")
echo "test accuracy after one epoch: $a% with $ranks processes, $b% with one"
echo "last learning rate: $lr_a with $ranks processes, $lr_b with one"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.3) }'
awk -v a="$lr_a" -v b="$lr_b" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b > 0 && d <= 1e-6 * b) }'

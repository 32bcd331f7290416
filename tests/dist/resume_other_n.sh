#!/usr/bin/env bash
# resume_other_n.sh TESSERA_TRAIN: a checkpoint written by 2 processes resumes with 3 (and one),
# continuing where it stopped: the epoch count and the step count go on.
set -euo pipefail
train=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--model mlp --accelerator cpu -q --batch-size 16 --limit-train-batches 4
        --limit-test-batches 2 --checkpoint-dir "$dir")
"$train" "${common[@]}" --devices 2 --epochs 1
ls "$dir"
out=$("$train" "${common[@]}" --devices 3 --epochs 2 --resume)
echo "$out"
grep -q "after 2 epoch(s), 8 step(s)" <<<"$out"
out=$("$train" "${common[@]}" --epochs 3 --resume)
echo "$out"
grep -q "after 3 epoch(s), 12 step(s)" <<<"$out"

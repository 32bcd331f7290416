#!/usr/bin/env bash
# The main job: set up, build (Release) and train the MLP on Fashion-MNIST on the best device
# (TESSERA_DEVICE picks another). Extra arguments go to tessera-train (--model cnn, --epochs 3...).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p out
exec build/bin/tessera-train --model mlp --epochs 10 --metrics out/mlp-metrics.csv \
  --plot out/mlp-curves.png --checkpoint-dir out/checkpoints "$@"

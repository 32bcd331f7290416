#!/usr/bin/env bash
# The main job: set up, build (Release) and train the MLP on Fashion-MNIST for 10 epochs on the
# best device (TESSERA_DEVICE picks another), with metrics, curves and checkpoints under out/.
# Arguments go to tessera-train and win over these defaults: --model cnn, --epochs 3, --resume...
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release
mkdir -p out
args=()
has() { case " $* " in *" $opt "* | *" $opt="*) return 0 ;; esac; return 1; }
for pair in "--metrics out/metrics.csv" "--plot out/curves.png" "--checkpoint-dir out/checkpoints"; do
  opt=${pair%% *}
  has "$@" || args+=($pair)
done
exec build/bin/tessera-train "${args[@]}" "$@"

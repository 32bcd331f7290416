#!/usr/bin/env bash
# The main job: set up, build (Release) and check every device with tessera-devices --check.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release
exec build/bin/tessera-devices --check "$@"

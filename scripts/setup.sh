#!/usr/bin/env bash
# Installs Tessera's build dependencies (OpenBLAS and oneDNN for the CPU plugin's GEMMs; the OpenCL
# ICD loader and headers, the Vulkan loader and headers and glslc for the GPU plugins, clang for
# the Vulkan plugin's PTX GEMM (VK_NVX_binary_import on NVIDIA's Hopper GPUs); PoCL and
# Mesa's lavapipe so that both run on the CPU), the Fashion-MNIST data, the fortunes text (the
# default corpus of the character-level GPT), gnuplot (for tessera-train --plot) and Open MPI
# (data-parallel training, tessera::dist: the tree is configured with TESSERA_WITH_MPI=ON) from
# Debian's packages (idempotent: apt runs only when one is missing) and configures + builds a tree.
#   scripts/setup.sh BUILD_DIR [extra cmake arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build pkg-config libboost-dev libboost-program-options-dev libspdlog-dev
          libfmt-dev libopenblas0 libdnnl2 nlohmann-json3-dev libgtest-dev libgmock-dev zlib1g-dev
          dataset-fashion-mnist fortunes gnuplot-nox ocl-icd-opencl-dev opencl-c-headers
          pocl-opencl-icd libvulkan-dev glslc clang mesa-vulkan-drivers openmpi-bin libopenmpi-dev
          ${TESSERA_EXTRA_PACKAGES:-})
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tessera: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build="$1"
shift
cmake -S . -B "$build" -G Ninja -DTESSERA_WITH_MPI=ON "$@" >/dev/null
# One job more than cores: a link or a header read then never leaves a core idle (on CI's 2 cores
# the three trees of scripts/test.sh are most of its time).
cmake --build "$build" --parallel "$(($(nproc) + 1))"

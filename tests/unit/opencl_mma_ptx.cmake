# The OpenCL plugin's own NVIDIA GEMMs (plugins/common/nvidia/gemm_mma.cl, gemm_wgmma.cl,
# gemm_tf32.cl, gemm_ffma.cl) compiled to PTX by clang for an NVIDIA target, as NVIDIA's OpenCL
# compiler would take them: CI has no NVIDIA GPU, so this is where a change to a kernel's text meets
# a compiler before the H100 runs it. Each is built after ptx.cl, the 16-bit ones also after
# gemm16.cl, as the plugin builds them. For each variant the build must succeed and the PTX must
# hold the instructions the kernel is for and no local memory (the fragment arrays stay in
# registers).
# cmake -DCLANG=... -DPRELUDE=.../ptx.cl -DPRELUDE16=.../gemm16.cl -DSOURCE=.../gemm_mma.cl
#       -DSOURCE_TF32=.../gemm_tf32.cl -DSOURCE_WGMMA=.../gemm_wgmma.cl
#       -DSOURCE_FFMA=.../gemm_ffma.cl
#       -DOUT=<dir> -P opencl_mma_ptx.cmake

# Compiles |source| after ptx.cl (and gemm16.cl, for the 16-bit GEMMs) with the definitions
# |defines| (a list of NAME=VALUE) into OUT/|name|.ptx and requires each of the strings |wants| in
# it, at least |products| matches of |product|, and no local memory.
function(check_ptx name source defines wants product products)
  set(ptx ${OUT}/${name}.ptx)
  list(TRANSFORM defines PREPEND "-D")
  set(includes -include ${PRELUDE})
  if(NOT source STREQUAL SOURCE_TF32 AND NOT source STREQUAL SOURCE_FFMA)
    list(APPEND includes -include ${PRELUDE16})
  endif()
  execute_process(
    COMMAND ${CLANG} -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl
            -Xclang -finclude-default-header -O2 -march=sm_80 -Werror -S ${defines}
            ${includes} ${source} -o ${ptx}
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} does not compile:\n${err}")
  endif()
  file(READ ${ptx} text)
  foreach(want ${wants})
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: no ${want} in its PTX")
    endif()
  endforeach()
  string(REGEX MATCHALL "${product}" found "${text}")
  list(LENGTH found count)
  if(count LESS products)
    message(FATAL_ERROR "${name}: ${count} of ${product}, expected at least ${products}")
  endif()
  string(FIND "${text}" ".local" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${name} uses local memory")
  endif()
endfunction()

# The f32 GEMM on TF32 products: each flag set (ops_gemm.cpp's tf32_gemm V0: transposed A and B,
# bias) and both precisions (V1 3: high, 1: medium): the TF32 product, three (or one) a fragment
# pair (96 or 32 in the K loop's two steps), the rounding to TF32, cp.async, and ldmatrix where an
# operand's rows run along K.
foreach(v1 1 3)
  foreach(v0 0 1 2 3 8 11)
    set(product "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
    set(wants "cvt.rna.tf32.f32;cp.async.cg.shared.global;cp.async.wait_group")
    math(EXPR trans_a "${v0} % 2")
    math(EXPR trans_b "(${v0} / 2) % 2")
    if(trans_a EQUAL 0 OR trans_b EQUAL 1)
      list(APPEND wants "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
    endif()
    math(EXPR products "32 * ${v1}")
    check_ptx(gemm_tf32_${v0}_${v1} ${SOURCE_TF32} "V0=${v0};V1=${v1}" "${wants}" "${product}"
              ${products})
  endforeach()
endforeach()

# The f32 GEMM through cp.async, as the OpenCL plugin builds its source where it has no PTX module
# of it (ffma_gemm_options: K slices of 8, four in flight; the modules are checked as they are built,
# ../../plugins/common/nvidia/ptx_module.cmake), with and without a bias: 64 fused multiply-adds a
# row of the slice (8 x 8 sums; the loop over the slice's 8 rows unrolled: 512 at least), 16-byte
# cp.async, the wait for all but the newest two slices' copies.
foreach(v0 1 9)
  check_ptx(gemm_ffma_${v0} ${SOURCE_FFMA} "V0=${v0};BK=8;STAGES=4;TK_NO_SHM_ARG"
            "cp.async.cg.shared.global;cp.async.wait_group 2;cp.async.commit_group" "fma.rn.f32"
            512)
endforeach()

# The 16-bit GEMMs, each operand type and a set of the launch flags (ops_gemm.cpp's coop_gemm V0:
# transposed A and B, split K, f32 out, bias). mma.sync's kernel: the product of that type,
# ldmatrix, cp.async. The Hopper kernel as the plugin builds it (TK_WGMMA_COMMENTED: the sm_90a
# instructions as "//@" comments that Programs::Retarget::sm_90a turns into instructions): the
# marked product of that type (two a K slice) with the layouts the flags name (a stored [K, M], V0 &
# 1, is M-major: 1; b stored [N, K], V0 & 2, K-major: 0), the marked fence, commit and wait, the
# proxy fence and cp.async, and no sm_90a instruction unmarked (which NVIDIA's sm_90 assembler would
# refuse).
foreach(bf16 0 1)
  if(bf16)
    set(type "bf16.bf16")
  else()
    set(type "f16.f16")
  endif()
  foreach(v0 0 1 2 3 4 6 8 11 24 27)
    set(product "mma.sync.aligned.m16n8k16.row.col.f32.${type}.f32")
    check_ptx(gemm_mma_${v0}_${bf16} ${SOURCE} "V0=${v0};TK_BF16=${bf16}"
              "${product};ldmatrix.sync.aligned;cp.async.cg.shared.global;cp.async.wait_group"
              "${product}" 1)

    math(EXPR major_a "${v0} % 2")
    math(EXPR major_b "1 - (${v0} / 2) % 2")
    set(product "//@wgmma.mma_async.sync.aligned.m64n128k16.f32.${type} {%f")
    check_ptx(gemm_wgmma_${v0}_${bf16} ${SOURCE_WGMMA} "V0=${v0};TK_BF16=${bf16};TK_WGMMA_COMMENTED"
              "//@wgmma.fence.sync.aligned;//@wgmma.commit_group.sync.aligned;//@wgmma.wait_group.sync.aligned 0;fence.proxy.async.shared::cta;cp.async.cg.shared.global;, p, 1, 1, ${major_a}, ${major_b};"
              "${product}" 2)
    file(READ ${OUT}/gemm_wgmma_${v0}_${bf16}.ptx text)
    string(REGEX MATCH "[^@]wgmma\\." unmarked "${text}")
    if(unmarked)
      message(FATAL_ERROR "gemm_wgmma_${v0}_${bf16}: an unmarked wgmma instruction")
    endif()
    # The same kernel as the Vulkan plugin's modules build it by default (its CMakeLists.txt's
    # TESSERA_PTX_GEMM_DEFINES): 128 x 256 tiles, K slices of 64 (four products each), four
    # stages, one slice's products left in flight.
    set(product "//@wgmma.mma_async.sync.aligned.m64n256k16.f32.${type} {%f")
    check_ptx(gemm_wgmma_wide_${v0}_${bf16} ${SOURCE_WGMMA}
              "V0=${v0};TK_BF16=${bf16};TK_WGMMA_COMMENTED;BN=256;BK=64;STAGES=4;WG_IN_FLIGHT=1;SMEM_LIMIT=196608"
              "//@wgmma.wait_group.sync.aligned 1;//@wgmma.wait_group.sync.aligned 0;cp.async.wait_group 1;, p, 1, 1, ${major_a}, ${major_b};"
              "${product}" 4)
  endforeach()
endforeach()

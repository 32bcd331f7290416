# One PTX module of the Vulkan plugin for VK_NVX_binary_import (../CMakeLists.txt, cu_kernels.cpp),
# compiled by clang for the CUDA kernel ABI from OpenCL C: SOURCE after PRELUDES, with the macros
# DEFINES. Two kinds:
# - KIND wgmma (the default): the Hopper GEMM both GPU plugins share (SOURCE
#   ../../common/nvidia/gemm_wgmma.cl after workitems.cl, ptx.cl, gemm16.cl) with the launch flags
#   V0 and the operand type BF16, its sm_90a instructions written as "//@" comments
#   (TK_WGMMA_COMMENTED, as the OpenCL plugin builds it). clang's NVPTX back end knows sm_80 and
#   PTX 7.0 at most (Debian 12's clang 14), so the text is then retargeted as the OpenCL plugin's
#   ptx_retarget.cpp retargets NVIDIA's: PTX ISA 8.0 (wgmma's), `.target sm_90a`, the marks
#   removed.
# - KIND portable: a portable kernel (SOURCE ../../common/kernels/NAME.tk after workitems.cl,
#   portable.cl, NAME.tk.defs, prelude.cl and common.tk: the program the OpenCL plugin builds) with
#   its variant V0..V3 and TK_STATIC_SHM in DEFINES, 32-bit shared-memory addresses; sm_80 PTX as
#   clang writes it (the driver compiles it for the GPU).
# - KIND ffma: the f32 GEMM through cp.async both GPU plugins share (SOURCE
#   ../../common/nvidia/gemm_ffma.cl after workitems.cl and ptx.cl) with its launch flags V0, 32-bit
#   shared-memory addresses, sm_80 PTX as clang writes it, and MAXNREG (registers an invocation).
# Comments and indentation go (the module is embedded). Fails the build where clang fails or the
# result lacks what the kernel is for.
# cmake -DCLANG=... [-DKIND=wgmma -DV0=n -DBF16=0|1 | -DKIND=ffma -DV0=n [-DMAXNREG=n] |
#       -DKIND=portable] -DPRELUDES="a|b|c"
#       [-DDEFINES="A=1|B=2"] -DSOURCE=... -DOUT=... -P module.cmake
if(NOT KIND)
  set(KIND wgmma)
endif()
string(REPLACE "|" ";" PRELUDES "${PRELUDES}")
set(includes "")
foreach(p IN LISTS PRELUDES)
  list(APPEND includes -include ${p})
endforeach()
# DEFINES: the kernel's tuning macros ("STAGES=3|WG_IN_FLIGHT=1"), each passed as -D.
string(REPLACE "|" ";" DEFINES "${DEFINES}")
foreach(d IN LISTS DEFINES)
  list(APPEND includes -D${d})
endforeach()
if(KIND STREQUAL "wgmma")
  list(APPEND includes -DV0=${V0} -DTK_BF16=${BF16} -DTK_WGMMA_COMMENTED)
elseif(KIND STREQUAL "ffma")
  # 32-bit shared-memory addresses, as for the portable kernels (below).
  list(APPEND includes -DV0=${V0} -Xclang -fcuda-short-ptr -mllvm -nvptx-short-ptr)
elseif(KIND STREQUAL "portable")
  # 32-bit shared-memory addresses, as NVIDIA's compilers use: the 128 x 128 GEMM took 186
  # registers instead of 254 and 64 x 128 134 instead of 186 (1024^3 1.12x faster on the H200).
  # The wgmma kernel computes its shared addresses itself (ptx.cl's smem) and lost 4-10% with
  # them (docs/bench/h200-vulkan-ptx-f32.txt).
  list(APPEND includes -Xclang -fcuda-short-ptr -mllvm -nvptx-short-ptr)
else()
  message(FATAL_ERROR "module.cmake: KIND ${KIND} is not wgmma, ffma or portable")
endif()
execute_process(
  COMMAND ${CLANG} -x cl -cl-std=CL1.2 -target nvptx64-nvidia-cuda -Xclang -finclude-default-header
          -O2 -march=sm_80 -Werror -S ${includes} ${SOURCE} -o ${OUT}.raw
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang could not compile ${SOURCE} (${includes}) for the CUDA ABI:\n${err}")
endif()
file(READ ${OUT}.raw text)
string(REGEX MATCHALL "\n\\.target sm_80\n" targets "${text}")
list(LENGTH targets count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "${OUT}.raw: not one `.target sm_80` line")
endif()
if(KIND STREQUAL "wgmma")
  string(REGEX REPLACE "\n\\.version [0-9]+\\.[0-9]+\n" "\n.version 8.0\n" text "${text}")
  string(REPLACE "\n.target sm_80\n" "\n.target sm_90a\n" text "${text}")
  string(REPLACE "//@" "" text "${text}")
endif()
string(REGEX REPLACE "\n[ \t]*//[^\n]*" "" text "${text}")
string(REGEX REPLACE "\n[ \t]+" "\n" text "${text}")
string(REGEX REPLACE "\n\n+" "\n" text "${text}")
if(KIND STREQUAL "wgmma")
  set(wants ".version 8.0" ".target sm_90a" ".entry tk_main" "wgmma.mma_async.sync.aligned"
      "wgmma.wait_group.sync.aligned" "fence.proxy.async" "cp.async")
elseif(KIND STREQUAL "ffma")
  set(wants ".target sm_80" ".entry tk_main" "cp.async.cg.shared.global" "cp.async.wait_group"
      "fma.rn.f32")
else()
  # The static scratch (TK_STATIC_SHM) in place of the __local argument.
  set(wants ".target sm_80" ".entry tk_main" "tk_static_shm")
endif()
foreach(want IN LISTS wants)
  string(FIND "${text}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${OUT}: no ${want}")
  endif()
endforeach()
# Every function the kernel calls is defined and inlined (an OpenCL built-in left to a library
# would fail to link in the driver: workitems.cl and portable.cl define those the kernels use).
foreach(unwanted ".extern" "call.uni" "call ")
  string(FIND "${text}" "${unwanted}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${OUT}: `${unwanted}` in the PTX: an OpenCL built-in the kernel calls is "
                        "not defined in ptx/workitems.cl or ptx/portable.cl")
  endif()
endforeach()
# The parameters CuKernels passes (VulkanQueue::launch_cu): eight addresses, the words' struct
# of 32 ints, the __local pointer.
set(params ".entry tk_main(\n")
foreach(i RANGE 7)
  string(APPEND params ".param .u64 tk_main_param_${i},\n")
endforeach()
string(APPEND params ".param .align 4 .b8 tk_main_param_8[128],\n.param .u64 tk_main_param_9\n)")
string(FIND "${text}" "${params}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${OUT}: tk_main's parameters are not the eight addresses, the 128-byte "
                      "words and the __local pointer that CuKernels passes")
endif()
# MAXNREG: the registers an invocation may take (.maxnreg), so that as many work-groups share an
# SM as the kernel is tuned for (what OpenCL's -cl-nv-maxrregcount does for NVIDIA's compiler).
if(MAXNREG)
  string(REPLACE "${params}" "${params}\n.maxnreg ${MAXNREG}" text "${text}")
endif()
file(WRITE ${OUT}.tmp "${text}")
file(RENAME ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.raw)

# One PTX module of a GPU plugin (ptx.cmake's tessera_ptx_module), compiled by clang from OpenCL C:
# SOURCE after PRELUDES, with the macros DEFINES, for one of two kernel ABIs:
# - ABI cuda (the default): the CUDA kernel ABI (target nvptx64-nvidia-cuda), for the Vulkan
#   plugin's VK_NVX_binary_import (../../vulkan/cu_kernels.cpp: VulkanQueue::launch_cu passes eight
#   addresses, the words and the __local pointer).
# - ABI opencl: NVIDIA's OpenCL kernel ABI (target nvptx64-nvidia-nvcl: `.target sm_80,
#   texmode_independent`, parameters marked .ptr .global), for the OpenCL plugin, which builds the
#   text as a program's binary (../../opencl/programs.cpp: Programs::ptx_kernel); KIND ffma alone,
#   built with TK_NO_SHM_ARG (no __local argument: its static 48 KiB is all a work-group gets
#   there).
# Three kinds:
# - KIND wgmma (the default): the Hopper GEMM both GPU plugins share (SOURCE gemm_wgmma.cl after
#   workitems.cl, ptx.cl, gemm16.cl) with the launch flags V0 and the operand type BF16, its sm_90a
#   instructions written as "//@" comments (TK_WGMMA_COMMENTED, as the OpenCL plugin builds it).
#   clang's NVPTX back end knows sm_80 and PTX 7.0 at most (Debian 12's clang 14), so the text is
#   then retargeted as the OpenCL plugin's ptx_retarget.cpp retargets NVIDIA's: PTX ISA 8.0
#   (wgmma's), `.target sm_90a`, the marks removed.
# - KIND portable (the Vulkan plugin's): a portable kernel (SOURCE ../kernels/NAME.tk after
#   workitems.cl, ../../vulkan/ptx/portable.cl, NAME.tk.defs, prelude.cl and common.tk: the program
#   the OpenCL plugin builds) with its variant V0..V3 and TK_STATIC_SHM in DEFINES, 32-bit
#   shared-memory addresses; sm_80 PTX as clang writes it (the driver compiles it for the GPU).
# - KIND ffma: the f32 GEMM through cp.async both GPU plugins share (SOURCE gemm_ffma.cl after
#   workitems.cl and ptx.cl) with its launch flags V0, 32-bit shared-memory addresses, sm_80 PTX as
#   clang writes it, and MAXNREG (registers an invocation).
# Comments and indentation go (the module is embedded). Fails the build where clang fails or the
# result lacks what the kernel is for.
# cmake -DCLANG=... [-DKIND=wgmma -DV0=n -DBF16=0|1 | -DKIND=ffma -DV0=n [-DMAXNREG=n] |
#       -DKIND=portable] [-DABI=cuda|opencl] -DPRELUDES="a|b|c"
#       [-DDEFINES="A=1|B=2"] -DSOURCE=... -DOUT=... -P ptx_module.cmake
if(NOT KIND)
  set(KIND wgmma)
endif()
if(NOT ABI)
  set(ABI cuda)
endif()
if(ABI STREQUAL "cuda")
  set(triple nvptx64-nvidia-cuda)
  set(target_line "
.target sm_80
")
elseif(ABI STREQUAL "opencl" AND KIND STREQUAL "ffma")
  set(triple nvptx64-nvidia-nvcl)
  set(target_line "
.target sm_80, texmode_independent
")
else()
  message(FATAL_ERROR "ptx_module.cmake: ABI ${ABI} is not cuda, or opencl with KIND ffma")
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
  if(ABI STREQUAL "opencl")
    list(APPEND includes -DTK_NO_SHM_ARG)
  endif()
elseif(KIND STREQUAL "portable")
  # 32-bit shared-memory addresses, as NVIDIA's compilers use: the 128 x 128 GEMM took 186
  # registers instead of 254 and 64 x 128 134 instead of 186 (1024^3 1.12x faster on the H200).
  # The wgmma kernel computes its shared addresses itself (ptx.cl's smem) and lost 4-10% with
  # them (docs/bench/h200-vulkan-ptx-f32.txt).
  list(APPEND includes -Xclang -fcuda-short-ptr -mllvm -nvptx-short-ptr)
else()
  message(FATAL_ERROR "ptx_module.cmake: KIND ${KIND} is not wgmma, ffma or portable")
endif()
execute_process(
  COMMAND ${CLANG} -x cl -cl-std=CL1.2 -target ${triple} -Xclang -finclude-default-header
          -O2 -march=sm_80 -Werror -S ${includes} ${SOURCE} -o ${OUT}.raw
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang could not compile ${SOURCE} (${includes}) for ${triple}:\n${err}")
endif()
file(READ ${OUT}.raw text)
# One .target line, the one the ABI's triple writes.
string(REGEX MATCHALL "\n\\.target " targets "${text}")
list(LENGTH targets count)
string(FIND "${text}" "${target_line}" at)
if(NOT count EQUAL 1 OR at EQUAL -1)
  string(STRIP "${target_line}" want)
  message(FATAL_ERROR "${OUT}.raw: not one `.target` line, `${want}`")
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
                        "not defined in workitems.cl (or the Vulkan plugin's ptx/portable.cl)")
  endif()
endforeach()
# The parameters the plugin passes: eight addresses and the words' struct of 32 ints; then, for the
# CUDA ABI, the __local pointer (CuKernels: VulkanQueue::launch_cu); NVIDIA's OpenCL ABI marks each
# address a global pointer (OpenclLauncher::launch sets no __local argument for gemm_ffma).
set(params ".entry tk_main(\n")
foreach(i RANGE 7)
  if(ABI STREQUAL "cuda")
    string(APPEND params ".param .u64 tk_main_param_${i},\n")
  else()
    string(APPEND params ".param .u64 .ptr .global .align 4 tk_main_param_${i},\n")
  endif()
endforeach()
if(ABI STREQUAL "cuda")
  string(APPEND params ".param .align 4 .b8 tk_main_param_8[128],\n.param .u64 tk_main_param_9\n)")
else()
  string(APPEND params ".param .align 4 .b8 tk_main_param_8[128]\n)")
endif()
string(FIND "${text}" "${params}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${OUT}: tk_main's parameters are not those the ${ABI} plugin passes (eight "
                      "addresses, the 128-byte words and, for the CUDA ABI, the __local pointer)")
endif()
# MAXNREG: the registers an invocation may take (.maxnreg), so that as many work-groups share an
# SM as the kernel is tuned for (what OpenCL's -cl-nv-maxrregcount does for NVIDIA's compiler).
if(MAXNREG)
  string(REPLACE "${params}" "${params}\n.maxnreg ${MAXNREG}" text "${text}")
endif()
file(WRITE ${OUT}.tmp "${text}")
file(RENAME ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.raw)

# The NVIDIA kernels of this directory compiled at build time by clang (Debian: clang) to PTX, for
# the GPU plugins that embed such modules: the Vulkan plugin (the CUDA kernel ABI, loaded through
# VK_NVX_binary_import) and the OpenCL plugin (NVIDIA's OpenCL kernel ABI, built by the driver as a
# program's binary). Included by each plugin's CMakeLists.txt; sets in the including scope:
# - TESSERA_PTX_MODULES_OK: TRUE where clang was found, compiles OpenCL C for NVPTX, and
#   TESSERA_EMBED_PTX is ON; otherwise FALSE, and the plugin is built without its modules
#   (saying so once, naming |TESSERA_PTX_FOR|, the plugin and what it goes without).
# - TESSERA_NVIDIA_KERNELS: this directory.
# - tessera_ptx_module(LIST name comment KIND k [ABI cuda|opencl] SOURCE s [PRELUDES ...]
#   [DEFINES ...] [ARGS ...]): one module built by ptx_module.cmake into ptx/NAME.ptx of the
#   plugin's build tree and appended to the variable LIST; rebuilt when any input changes.
# - TESSERA_PTX_FFMA_DEFINES (cache): gemm_ffma.cl's tuning macros for both plugins' modules.
set(TESSERA_NVIDIA_KERNELS ${CMAKE_CURRENT_LIST_DIR})
find_program(TESSERA_CLANG clang)
set(TESSERA_PTX_MODULES_OK FALSE)
if(TESSERA_CLANG AND TESSERA_EMBED_PTX)
  # A clang without the NVPTX back end (not Debian's) leaves the plugins without them too.
  set(probe ${CMAKE_CURRENT_BINARY_DIR}/nvptx_probe)
  file(WRITE ${probe}.cl "__kernel void k(__global int* p) { *p = 1; }\n")
  execute_process(
    COMMAND ${TESSERA_CLANG} -x cl -cl-std=CL1.2 -target nvptx64-nvidia-cuda -march=sm_80 -S
            -o ${probe}.ptx ${probe}.cl
    RESULT_VARIABLE nvptx_rc OUTPUT_QUIET ERROR_VARIABLE nvptx_err)
  if(nvptx_rc EQUAL 0)
    set(TESSERA_PTX_MODULES_OK TRUE)
  else()
    message(STATUS "${TESSERA_CLANG} can not compile OpenCL C for NVPTX: the ${TESSERA_PTX_FOR} "
                   "(${nvptx_err})")
  endif()
elseif(NOT TESSERA_CLANG)
  message(STATUS "clang not found: the ${TESSERA_PTX_FOR}")
else()
  message(STATUS "TESSERA_EMBED_PTX=OFF: the ${TESSERA_PTX_FOR}")
endif()

# K slices of 16, three in flight (48 KiB of static shared memory), at most 128 registers, so that
# two work-groups share an SM. On the H200 a Vulkan module launched through VK_NVX_binary_import
# with 66 KiB ran 15% slower than launched by the CUDA driver, as if one work-group an SM; at 48
# KiB and less, as fast (docs/bench/h200-ffma.txt). 48 KiB is all a work-group gets through
# NVIDIA's OpenCL.
set(TESSERA_PTX_FFMA_DEFINES "BK=16;STAGES=3;SMEM_LIMIT=49152" CACHE STRING
    "gemm_ffma.cl's tuning macros for the GPU plugins' PTX modules (NAME=VALUE list)")

function(tessera_ptx_module list name comment)
  cmake_parse_arguments(M "" "KIND;ABI;SOURCE" "PRELUDES;DEFINES;ARGS" ${ARGN})
  if(NOT M_ABI)
    set(M_ABI cuda)
  endif()
  set(out ${CMAKE_CURRENT_BINARY_DIR}/ptx/${name}.ptx)
  set(script ${TESSERA_NVIDIA_KERNELS}/ptx_module.cmake)
  string(REPLACE ";" "|" preludes "${M_PRELUDES}")
  string(REPLACE ";" "|" defines "${M_DEFINES}")
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DCLANG=${TESSERA_CLANG} -DKIND=${M_KIND} -DABI=${M_ABI} ${M_ARGS}
            -DPRELUDES=${preludes} -DDEFINES=${defines} -DSOURCE=${M_SOURCE} -DOUT=${out}
            -P ${script}
    DEPENDS ${M_PRELUDES} ${M_SOURCE} ${script}
    COMMENT "clang ${comment} to PTX"
    VERBATIM)
  set(${list} ${${list}} ${out} PARENT_SCOPE)
endfunction()

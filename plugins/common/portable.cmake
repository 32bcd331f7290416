# The portable kernel layer (portable.h, kernels/README.md): the host sources that both GPU
# plugins compile, and the kernels they run. A new op adds its launch code to an ops_*.cpp below
# and its kernel's name (kernels/NAME.tk) to TESSERA_PORTABLE_KERNELS; neither plugin changes.
set(TESSERA_PORTABLE_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TESSERA_PORTABLE_SOURCES
  ${TESSERA_PORTABLE_DIR}/portable.cpp
  ${TESSERA_PORTABLE_DIR}/ops_base.cpp

  # --- tensor API: casts, factories, indexing ---
  ${TESSERA_PORTABLE_DIR}/ops_tensor.cpp

  # --- element-wise math, comparisons, selection ---
  ${TESSERA_PORTABLE_DIR}/ops_pointwise.cpp

  # --- reductions, normalisation, losses, optimizers ---
  ${TESSERA_PORTABLE_DIR}/ops_reduce.cpp

  # --- GEMM: matmul, addmm, bmm ---
  ${TESSERA_PORTABLE_DIR}/ops_gemm.cpp

  # --- nn: batched matmul, embedding, pooling, attention ---
  # attention
  ${TESSERA_PORTABLE_DIR}/ops_attention.cpp
  ${TESSERA_PORTABLE_DIR}/ops_nn.cpp
)
set(TESSERA_PORTABLE_KERNELS
  binary copy max_pool optim reduce sum_rows transpose unary

  # --- GEMM: matmul, addmm, bmm ---
  gemm

  # --- tensor API: casts, factories, indexing ---
  tensor_arange
  tensor_cast
  tensor_copy
  tensor_index_backward
  tensor_index_select
  tensor_random

  # --- element-wise math, comparisons, selection ---
  pointwise_unary
  pointwise_strided

  # --- reductions, normalisation, losses, optimizers ---
  reduce_line layer_norm batch_norm batch_norm_backward cross_entropy sum_squares adamw

  # --- nn: batched matmul, embedding, pooling, attention ---
  # attention
  attention_fwd
  attention_delta
  attention_bwd_kv
  attention_bwd_q
  flash_fwd
  flash_bwd_kv
  flash_bwd_q
  flash_bwd_dq
  embedding embedding_backward avg_pool conv2d conv2d_backward_weight
)
set(TESSERA_PORTABLE_PRELUDE
  ${TESSERA_PORTABLE_DIR}/kernels/prelude.glsl ${TESSERA_PORTABLE_DIR}/kernels/prelude.cl
  ${TESSERA_PORTABLE_DIR}/kernels/common.tk)

# The definitions the build gives kernel |k| (kernels/README.md, "What the build defines"), by
# what its text names: TK_BYTES for byte access (LDB/STB), TK_HALF for 16-bit stores
# (STS/STH/STBH/STX/STX2/STXT), TK_SHM4 for 4-float shared access
# (SHM4, or common.tk's TK_MMA8X4, TK_TILE_* and TK_STORE_* that use it), and for each binding b TK_MODE_<b>: RO where a line "// tk-readonly: 0 1" names it (and
# TK_READONLY_<b>), WO where "// tk-writeonly: 2" does, else RW. Both plugins take them from here:
# Vulkan in the wrapper it compiles, OpenCL from NAME.tk.defs embedded beside the text.
function(tessera_portable_defines k out)
  set(tk ${TESSERA_PORTABLE_DIR}/kernels/${k}.tk)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tk})
  file(READ ${tk} text)
  set(defs "")
  if(text MATCHES "(LDB|STB)\\(")
    string(APPEND defs "#define TK_BYTES\n")
  endif()
  if(text MATCHES "(STS|STH|STBH|STX|STX2|STXT)\\(")
    string(APPEND defs "#define TK_HALF\n")
  endif()
  if(text MATCHES "(SHM4|TK_MMA8X4|TK_TILE_[A-Z]+|TK_STORE_[A-Z]+)\\(")
    string(APPEND defs "#define TK_SHM4\n")
  endif()
  set(readonly "")
  set(writeonly "")
  foreach(access readonly writeonly)
    if(text MATCHES "// tk-${access}:([0-9 ]+)")
      string(REGEX MATCHALL "[0-9]+" ${access} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  foreach(b RANGE 7)
    if(b IN_LIST readonly)
      string(APPEND defs "#define TK_READONLY_${b}\n#define TK_MODE_${b} RO\n")
    elseif(b IN_LIST writeonly)
      string(APPEND defs "#define TK_MODE_${b} WO\n")
    else()
      string(APPEND defs "#define TK_MODE_${b} RW\n")
    endif()
  endforeach()
  set(${out} "${defs}" PARENT_SCOPE)
endfunction()

# The kernel sources as OpenCL embeds them: prelude.cl, common.tk, every NAME.tk and its
# NAME.tk.defs (written here).
function(tessera_portable_sources out)
  set(files ${TESSERA_PORTABLE_DIR}/kernels/prelude.cl ${TESSERA_PORTABLE_DIR}/kernels/common.tk)
  foreach(k IN LISTS TESSERA_PORTABLE_KERNELS)
    tessera_portable_defines(${k} defs)
    set(d ${CMAKE_CURRENT_BINARY_DIR}/tk/${k}.tk.defs)
    file(CONFIGURE OUTPUT ${d} CONTENT "${defs}")
    list(APPEND files ${TESSERA_PORTABLE_DIR}/kernels/${k}.tk ${d})
  endforeach()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

# Every kernel compiled by glslc to NAME.tk.spv (Vulkan 1.2 SPIR-V), through a wrapper that
# defines what tessera_portable_defines gives it and includes prelude.glsl.
function(tessera_portable_spirv out)
  find_program(TESSERA_GLSLC glslc REQUIRED)
  set(spvs "")
  foreach(k IN LISTS TESSERA_PORTABLE_KERNELS)
    set(tk ${TESSERA_PORTABLE_DIR}/kernels/${k}.tk)
    tessera_portable_defines(${k} defs)
    set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/tk/${k}.comp)
    file(CONFIGURE OUTPUT ${wrapper} CONTENT
         "#version 450\n#extension GL_GOOGLE_include_directive : require\n${defs}#include \"prelude.glsl\"\n#include \"${k}.tk\"\n")
    set(spv ${CMAKE_CURRENT_BINARY_DIR}/tk/${k}.tk.spv)
    add_custom_command(OUTPUT ${spv}
      COMMAND ${TESSERA_GLSLC} --target-env=vulkan1.2 -O -I ${TESSERA_PORTABLE_DIR}/kernels
              -MD -MF ${spv}.d -o ${spv} ${wrapper}
      DEPENDS ${wrapper} ${tk} ${TESSERA_PORTABLE_PRELUDE}
      DEPFILE ${spv}.d
      COMMENT "glslc kernels/${k}.tk"
      VERBATIM)
    list(APPEND spvs ${spv})
  endforeach()
  set(${out} ${spvs} PARENT_SCOPE)
endfunction()

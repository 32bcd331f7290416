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

  # --- nn: batched matmul, embedding, pooling, attention ---
  # attention
  ${TESSERA_PORTABLE_DIR}/ops_attention.cpp
  ${TESSERA_PORTABLE_DIR}/ops_nn.cpp
)
set(TESSERA_PORTABLE_KERNELS
  binary copy max_pool optim reduce sum_rows unary

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
  bmm embedding embedding_backward avg_pool conv2d conv2d_backward_weight
)
set(TESSERA_PORTABLE_PRELUDE
  ${TESSERA_PORTABLE_DIR}/kernels/prelude.glsl ${TESSERA_PORTABLE_DIR}/kernels/prelude.cl
  ${TESSERA_PORTABLE_DIR}/kernels/common.tk)

# The kernel sources as OpenCL embeds them: prelude.cl, common.tk and every NAME.tk.
function(tessera_portable_sources out)
  set(files ${TESSERA_PORTABLE_DIR}/kernels/prelude.cl ${TESSERA_PORTABLE_DIR}/kernels/common.tk)
  foreach(k IN LISTS TESSERA_PORTABLE_KERNELS)
    list(APPEND files ${TESSERA_PORTABLE_DIR}/kernels/${k}.tk)
  endforeach()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

# Every kernel compiled by glslc to NAME.tk.spv (Vulkan 1.2 SPIR-V), through a wrapper that
# includes prelude.glsl; a kernel that reads or writes bytes (LDB/STB) gets 8-bit storage, one that
# reads or writes 4 floats of shared memory at once (SHM4) its scratch as vec4s.
function(tessera_portable_spirv out)
  find_program(TESSERA_GLSLC glslc REQUIRED)
  set(spvs "")
  foreach(k IN LISTS TESSERA_PORTABLE_KERNELS)
    set(tk ${TESSERA_PORTABLE_DIR}/kernels/${k}.tk)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tk})
    file(READ ${tk} text)
    set(bytes "")
    if(text MATCHES "(LDB|STB)\\(")
      set(bytes "#define TK_BYTES\n")
    endif()
    if(text MATCHES "SHM4\\(")
      string(APPEND bytes "#define TK_SHM4\n")
    endif()
    set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/tk/${k}.comp)
    file(CONFIGURE OUTPUT ${wrapper} CONTENT
         "#version 450\n#extension GL_GOOGLE_include_directive : require\n${bytes}#include \"prelude.glsl\"\n#include \"${k}.tk\"\n")
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

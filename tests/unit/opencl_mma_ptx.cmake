# The OpenCL plugin's tensor-core GEMM (plugins/opencl/kernels/gemm_mma.cl) compiled to PTX by
# clang for an NVIDIA target, as NVIDIA's OpenCL compiler would take it: CI has no NVIDIA GPU, so
# this is where a change to the kernel's text meets a compiler before the H100 runs it. For each
# operand type and a set of the launch flags (ops_gemm.cpp's V0: transposed A and B, split K, f32
# out, bias), the build must succeed and the PTX must hold the tensor-core product of that type,
# ldmatrix, cp.async, and no local memory (the fragment arrays stay in registers).
# cmake -DCLANG=... -DSOURCE=.../gemm_mma.cl -DOUT=<dir> -P opencl_mma_ptx.cmake
foreach(bf16 0 1)
  foreach(v0 0 1 2 3 4 6 8 11 24 27)
    set(ptx ${OUT}/gemm_mma_${v0}_${bf16}.ptx)
    execute_process(
      COMMAND ${CLANG} -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl
              -Xclang -finclude-default-header -O2 -march=sm_80 -Werror -S
              -DV0=${v0} -DTK_BF16=${bf16} ${SOURCE} -o ${ptx}
      RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "gemm_mma.cl with V0=${v0} TK_BF16=${bf16} does not compile:\n${err}")
    endif()
    file(READ ${ptx} text)
    if(bf16)
      set(type "bf16.bf16")
    else()
      set(type "f16.f16")
    endif()
    foreach(want "mma.sync.aligned.m16n8k16.row.col.f32.${type}.f32" "ldmatrix.sync.aligned"
                 "cp.async.cg.shared.global" "cp.async.wait_group")
      string(FIND "${text}" "${want}" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "gemm_mma.cl with V0=${v0} TK_BF16=${bf16}: no ${want} in its PTX")
      endif()
    endforeach()
    string(FIND "${text}" ".local" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "gemm_mma.cl with V0=${v0} TK_BF16=${bf16} uses local memory")
    endif()
  endforeach()
endforeach()

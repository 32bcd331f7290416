// The matrix-unit GEMM for bf16 operands, from the SPIR-V of its f16 form.
//
// shaders/gemm_coopmat.comp multiplies f16 fragments through VK_NV_cooperative_matrix: Debian
// 12's glslang compiles neither VK_KHR_cooperative_matrix nor bf16 types, so the bf16 kernel is
// made from the f16 kernel's SPIR-V by rewriting the words that differ: CooperativeMatrixNV
// types and instructions become their KHR forms (each matrix type's use, A, B or accumulator,
// read from the products that take it; the column-major flags become layouts), and the f16
// type becomes bf16 (SPV_KHR_bfloat16's OpTypeFloat 16 BFloat16KHR). The shader keeps f16 to
// its fragments (its loads and stores move raw 16-bit words; its rounding is integer code), so
// nothing else changes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::vulkan {

// The rewritten module, its fragments bf16 where |bf16| (else still f16: the same kernel through
// the KHR extension). Throws BackendError, saying what it found, where |nv| is not SPIR-V or
// holds what the rewrite does not map: f16 outside a matrix type (for bf16), an f32 operand or
// f16 sums, one matrix value used as two operands, a column-major flag that is not a
// constant, or a matrix value made by an instruction the rewrite does not follow (it follows
// variables, access chains, loads, stores, phis, copies, constants and the matrix instructions).
// A and B fragments of one shape share a type in the NV module; the B values and the pointers
// to them get copies of their types with the B use.
std::vector<std::uint32_t> coopmat_nv_to_khr(std::span<const std::uint32_t> nv, bool bf16);

}  // namespace tessera::vulkan

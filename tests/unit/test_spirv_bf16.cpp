// The Vulkan plugin's rewrite of the matrix-unit GEMM's SPIR-V for bf16 (plugins/vulkan/
// spirv_bf16.h), on the module the build compiled (TESSERA_COOPMAT_SPV) and on modules that it
// must refuse. The driver's acceptance of the result is checked where a device offers bf16
// matrix units (the conformance suite's bf16 products on vulkan:0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "../../plugins/vulkan/spirv_bf16.h"
#include "tessera/errors.h"

namespace {

using tessera::vulkan::coopmat_nv_to_khr;
using Words = std::vector<std::uint32_t>;

Words read_module(const char* path = TESSERA_COOPMAT_SPV) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Words w(bytes.size() / 4);
  std::memcpy(w.data(), bytes.data(), w.size() * 4);
  return w;
}

struct Inst {
  std::uint32_t op;
  Words w;
};
std::vector<Inst> parse(const Words& m) {
  std::vector<Inst> out;
  for (std::size_t at = 5; at < m.size();) {
    const std::uint32_t n = m[at] >> 16;
    EXPECT_GT(n, 0u);
    EXPECT_LE(at + n, m.size());
    if (n == 0 || at + n > m.size()) break;
    out.push_back({m[at] & 0xffff, Words(m.begin() + at + 1, m.begin() + at + n)});
    at += n;
  }
  return out;
}
std::string str(const Inst& i) {
  return reinterpret_cast<const char*>(i.w.data());
}

TEST(SpirvBf16, RewritesTheMatrixUnitGemm) {
  const Words nv = read_module();
  ASSERT_GT(nv.size(), 5u) << TESSERA_COOPMAT_SPV;
  const Words khr = coopmat_nv_to_khr(nv, true);
  EXPECT_EQ(khr[0], 0x07230203u);
  std::map<std::uint32_t, int> before, after;
  for (const Inst& i : parse(nv)) ++before[i.op];
  const auto insts = parse(khr);
  for (const Inst& i : insts) ++after[i.op];
  // Every NV matrix instruction has its KHR counterpart, one for one, save the f16 type, which
  // the A and B fragments and the rounded sums share: the B values and the rounded sums take
  // copies of it (and of the pointer types to it).
  for (std::uint32_t op = 5358; op <= 5362; ++op) {
    EXPECT_EQ(after[op], 0) << op;
    EXPECT_EQ(after[op - 5358 + 4456], before[op] + (op == 5358 ? 2 : 0)) << op;
  }
  EXPECT_GT(after[32], before[32]);
  // New ids: three constants and the copied types.
  EXPECT_EQ(khr[3], nv[3] + 3 + (after[32] - before[32]) + (after[28] - before[28]) + 2);
  EXPECT_GT(after[4459], 0);  // products
  EXPECT_EQ(after[43], before[43] + 3);

  std::map<std::uint32_t, std::uint32_t> consts;
  std::uint32_t half = 0;
  std::vector<std::string> exts;
  std::vector<std::uint32_t> caps;
  for (const Inst& i : insts) {
    if (i.op == 43 && i.w.size() == 3) consts[i.w[1]] = i.w[2];
    if (i.op == 22 && i.w[1] == 16) {
      ASSERT_EQ(i.w.size(), 3u);  // OpTypeFloat 16 BFloat16KHR
      EXPECT_EQ(i.w[2], 0u);
      half = i.w[0];
    }
    if (i.op == 10) exts.push_back(str(i));
    if (i.op == 17) caps.push_back(i.w[0]);
  }
  ASSERT_NE(half, 0u);
  EXPECT_NE(std::find(exts.begin(), exts.end(), "SPV_KHR_cooperative_matrix"), exts.end());
  EXPECT_NE(std::find(exts.begin(), exts.end(), "SPV_KHR_bfloat16"), exts.end());
  EXPECT_EQ(std::find(exts.begin(), exts.end(), "SPV_NV_cooperative_matrix"), exts.end());
  for (std::uint32_t cap : {6022u, 5116u, 5118u})
    EXPECT_NE(std::find(caps.begin(), caps.end(), cap), caps.end()) << cap;
  for (std::uint32_t cap : {5357u, 9u})  // CooperativeMatrixNV, Float16
    EXPECT_EQ(std::find(caps.begin(), caps.end(), cap), caps.end()) << cap;

  // The kernel's matrix types: bf16 A and B (16 x 16: one NV type, the B values retyped to a
  // copy of it), f32 accumulators.
  std::map<std::uint32_t, std::uint32_t> use;
  int a = 0, b = 0, acc = 0, rounded = 0;
  for (const Inst& i : insts)
    if (i.op == 4456) {
      ASSERT_EQ(i.w.size(), 6u);
      ASSERT_TRUE(consts.contains(i.w[5]));
      const std::uint32_t u = consts[i.w[5]], rows = consts[i.w[3]], cols = consts[i.w[4]];
      use[i.w[0]] = u;
      EXPECT_EQ(consts[i.w[2]], 3u);  // subgroup scope
      if (u == 0) {
        ++a;
        EXPECT_EQ(i.w[1], half);
        EXPECT_EQ(rows, 16u);
        EXPECT_EQ(cols, 16u);
      } else if (u == 1) {
        ++b;
        EXPECT_EQ(i.w[1], half);
        EXPECT_EQ(rows, 16u);
        EXPECT_EQ(cols, 16u);
      } else {
        EXPECT_EQ(u, 2u);
        ++(i.w[1] == half ? rounded : acc);
      }
    }
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(acc, 1);      // f32 sums
  EXPECT_EQ(rounded, 1);  // the sums converted to bf16 to be stored
  // Products take A, B and accumulators, and every load of a matrix reads it through a pointer
  // to its own type (the B values' variables retyped with them); matrix loads carry a layout
  // constant (0 or 1) then the stride.
  std::map<std::uint32_t, std::uint32_t> pointee, type_of;
  for (const Inst& i : insts) {
    if (i.op == 32) pointee[i.w[0]] = i.w[2];
    if (i.op == 59 || i.op == 61 || i.op == 65 || i.op == 115 || i.op == 4457 || i.op == 4459)
      type_of[i.w[1]] = i.w[0];
  }
  int loads = 0;
  for (const Inst& i : insts) {
    if (i.op == 61 && use.contains(i.w[0])) {
      ++loads;
      ASSERT_TRUE(type_of.contains(i.w[2]));
      EXPECT_EQ(pointee[type_of[i.w[2]]], i.w[0]) << "load %" << i.w[1];
    }
    if (i.op == 62 && type_of.contains(i.w[1]) && use.contains(type_of[i.w[1]])) {
      ASSERT_TRUE(type_of.contains(i.w[0]));
      EXPECT_EQ(pointee[type_of[i.w[0]]], type_of[i.w[1]]) << "store into %" << i.w[0];
    }
    if (i.op == 115 && use.contains(i.w[0])) {  // OpFConvert of sums: accumulators both
      EXPECT_EQ(use[i.w[0]], 2u);
      EXPECT_EQ(use[type_of[i.w[2]]], 2u);
    }
    if (i.op == 4459) {
      EXPECT_EQ(use[i.w[0]], 2u);
      EXPECT_EQ(use[type_of[i.w[2]]], 0u);
      EXPECT_EQ(use[type_of[i.w[3]]], 1u);
      EXPECT_EQ(use[type_of[i.w[4]]], 2u);
    }
    if (i.op == 4457) {
      ASSERT_GE(i.w.size(), 5u);
      ASSERT_TRUE(consts.contains(i.w[3]));
      EXPECT_LE(consts[i.w[3]], 1u);
    }
  }
  EXPECT_GT(loads, 0);
}

// The attention kernels (shaders/attention_coopmat.comp): every NV matrix instruction becomes its
// KHR form, the products take bf16 A and B fragments (16 x 16) and f32 sums, and each matrix
// load carries a layout constant.
TEST(SpirvBf16, RewritesTheMatrixUnitAttention) {
  const Words nv = read_module(TESSERA_ATTENTION_SPV);
  ASSERT_GT(nv.size(), 5u) << TESSERA_ATTENTION_SPV;
  const Words khr = coopmat_nv_to_khr(nv, true);
  std::map<std::uint32_t, int> before, after;
  for (const Inst& i : parse(nv)) ++before[i.op];
  const auto insts = parse(khr);
  for (const Inst& i : insts) ++after[i.op];
  for (std::uint32_t op = 5359; op <= 5362; ++op) {
    EXPECT_EQ(after[op], 0) << op;
    EXPECT_EQ(after[op - 5358 + 4456], before[op]) << op;
  }
  EXPECT_EQ(after[5358], 0);
  EXPECT_GT(after[4459], 0);  // products
  std::map<std::uint32_t, std::uint32_t> consts, use, type_of;
  std::uint32_t half = 0;
  for (const Inst& i : insts) {
    if (i.op == 43 && i.w.size() == 3) consts[i.w[1]] = i.w[2];
    if (i.op == 22 && i.w[1] == 16) half = i.w[0];
    if (i.op == 4456) use[i.w[0]] = consts[i.w[5]];
    if (i.op == 61 || i.op == 4457 || i.op == 4459) type_of[i.w[1]] = i.w[0];
  }
  for (const Inst& i : insts) {
    if (i.op == 4456) {
      const std::uint32_t u = consts[i.w[5]];
      EXPECT_EQ(consts[i.w[3]], 16u);
      EXPECT_EQ(consts[i.w[4]], 16u);
      EXPECT_EQ(i.w[1] == half, u != 2) << "use " << u;  // bf16 operands, f32 sums
    }
    if (i.op == 4459) {
      EXPECT_EQ(use[i.w[0]], 2u);
      EXPECT_EQ(use[type_of[i.w[2]]], 0u);
      EXPECT_EQ(use[type_of[i.w[3]]], 1u);
    }
    if (i.op == 4457) {
      ASSERT_GE(i.w.size(), 5u);
      ASSERT_TRUE(consts.contains(i.w[3]));
      EXPECT_LE(consts[i.w[3]], 1u);
    }
  }
  EXPECT_NE(half, 0u);
}

// A minimal module: header, capabilities, the extension, then |body|.
Words module(const Words& body) {
  Words m = {0x07230203u, 0x00010500u, 0u, 100u, 0u};
  auto add = [&](std::uint32_t op, Words w) {
    m.push_back(static_cast<std::uint32_t>(w.size() + 1) << 16 | op);
    m.insert(m.end(), w.begin(), w.end());
  };
  add(17, {1});
  add(17, {5357});
  Words ext(7, 0);
  std::memcpy(ext.data(), "SPV_NV_cooperative_matrix", 25);
  add(10, ext);
  m.insert(m.end(), body.begin(), body.end());
  return m;
}
std::uint32_t head(std::uint32_t op, std::uint32_t words) {
  return words << 16 | op;
}

TEST(SpirvBf16, RefusesWhatItDoesNotMap) {
  EXPECT_THROW(coopmat_nv_to_khr(Words{1, 2, 3}, true), tessera::BackendError);
  EXPECT_THROW(coopmat_nv_to_khr(Words{0x12345678u, 0, 0, 10, 0}, true), tessera::BackendError);
  // An instruction whose word count runs past the end.
  EXPECT_THROW(coopmat_nv_to_khr(module({head(17, 9), 1}), true), tessera::BackendError);
  // No f16 type at all.
  EXPECT_THROW(coopmat_nv_to_khr(module({head(21, 4), 1, 32, 0}), true), tessera::BackendError);
  // f16 used by a vector type (f16 arithmetic, which bf16 does not have).
  const Words types = {head(21, 4), 1, 32, 0, head(22, 3), 2, 16, head(23, 4), 3, 2, 4};
  try {
    coopmat_nv_to_khr(module(types), true);
    ADD_FAILURE() << "no error";
  } catch (const tessera::BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("f16 is used outside a matrix type"), std::string::npos)
        << e.what();
  }
  // An f16 matrix type that no product takes.
  const Words unused = {
      head(21, 4), 1,           32, 0,  head(43, 4),   1, 5, 16, head(43, 4), 1, 6,
      3,           head(22, 3), 2,  16, head(5358, 6), 7, 2, 6,  5,           5};
  EXPECT_THROW(coopmat_nv_to_khr(module(unused), true), tessera::BackendError);
  // The same f16 vector is no error when the fragments stay f16 (the KHR form of the f16 kernel
  // does not retype f16), but the module still has no product to read the uses from.
  EXPECT_THROW(coopmat_nv_to_khr(module(unused), false), tessera::BackendError);
}

TEST(SpirvBf16, KeepsF16WhereAsked) {
  const Words nv = read_module();
  const Words khr = coopmat_nv_to_khr(nv, false);
  bool float16 = false, bfloat16 = false;
  for (const Inst& i : parse(khr)) {
    if (i.op == 17 && i.w[0] == 9) float16 = true;
    if (i.op == 17 && (i.w[0] == 5116 || i.w[0] == 5118)) bfloat16 = true;
    if (i.op == 22) {
      EXPECT_EQ(i.w.size(), 2u);  // no encoding operand
    }
    EXPECT_FALSE(i.op >= 5358 && i.op <= 5362) << i.op;
  }
  EXPECT_TRUE(float16);
  EXPECT_FALSE(bfloat16);
}

}  // namespace

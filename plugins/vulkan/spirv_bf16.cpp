// The matrix-unit GEMM's SPIR-V for bf16 fragments (spirv_bf16.h).
#include "spirv_bf16.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "tessera/errors.h"

namespace tessera::vulkan {
namespace {

// SPIR-V opcodes, capabilities and operands this rewrite reads or writes (the SPIR-V
// specification's unified tables; SPV_NV_cooperative_matrix, SPV_KHR_cooperative_matrix and
// SPV_KHR_bfloat16 for the extensions' own).
constexpr std::uint32_t kMagic = 0x07230203;
enum Op : std::uint32_t {
  kOpUndef = 1,
  kOpName = 5,
  kOpMemberName = 6,
  kOpExtension = 10,
  kOpCapability = 17,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpTypeVector = 23,
  kOpTypeMatrix = 24,
  kOpTypeArray = 28,
  kOpTypeRuntimeArray = 29,
  kOpTypeStruct = 30,
  kOpTypePointer = 32,
  kOpTypeFunction = 33,
  kOpConstantTrue = 41,
  kOpConstantFalse = 42,
  kOpConstant = 43,
  kOpConstantComposite = 44,
  kOpConstantNull = 46,
  kOpVariable = 59,
  kOpLoad = 61,
  kOpStore = 62,
  kOpAccessChain = 65,
  kOpInBoundsAccessChain = 66,
  kOpDecorate = 71,
  kOpMemberDecorate = 72,
  kOpCopyObject = 83,
  kOpFConvert = 115,
  kOpPhi = 245,
  kOpTypeCooperativeMatrixKHR = 4456,
  kOpCooperativeMatrixLoadKHR = 4457,
  kOpCooperativeMatrixStoreKHR = 4458,
  kOpCooperativeMatrixMulAddKHR = 4459,
  kOpCooperativeMatrixLengthKHR = 4460,
  kOpTypeCooperativeMatrixNV = 5358,
  kOpCooperativeMatrixLoadNV = 5359,
  kOpCooperativeMatrixStoreNV = 5360,
  kOpCooperativeMatrixMulAddNV = 5361,
  kOpCooperativeMatrixLengthNV = 5362,
};
constexpr std::uint32_t kCapFloat16 = 9, kCapCoopNV = 5357, kCapCoopKHR = 6022,
                        kCapBFloat16Type = 5116, kCapBFloat16CoopMatrix = 5118;
constexpr std::uint32_t kEncodingBFloat16 = 0;  // OpTypeFloat's FP Encoding operand
constexpr std::uint32_t kUseA = 0, kUseB = 1, kUseAccumulator = 2;
constexpr std::uint32_t kRowMajor = 0, kColumnMajor = 1;

struct Inst {
  std::uint32_t op;
  std::vector<std::uint32_t> w;  // the operands, after the opcode word
};

std::string_view literal_string(const Inst& i) {
  if (i.w.empty()) return {};
  const char* s = reinterpret_cast<const char*>(i.w.data());
  return {s, strnlen(s, i.w.size() * 4)};
}

std::vector<std::uint32_t> string_words(std::string_view s) {
  std::vector<std::uint32_t> w(s.size() / 4 + 1, 0);  // nul-terminated, zero-padded
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}

[[noreturn]] void refuse(std::string_view why) {
  throw BackendError(fmt::format(
      "the matrix-unit GEMM's SPIR-V can not be rewritten for VK_KHR_cooperative_matrix: {}", why));
}

// Type-declaring instructions (OpTypeVoid .. OpTypeForwardPointer, and the NV matrix type).
bool is_type(std::uint32_t op) {
  return (op >= 19 && op <= 39) || op == kOpTypeCooperativeMatrixNV;
}

// The instructions that may make a matrix value or a pointer to one ([result type, result,
// ...]): the rewrite follows each such value from its products back to its loads.
bool follows(std::uint32_t op) {
  switch (op) {
    case kOpVariable:
    case kOpLoad:
    case kOpAccessChain:
    case kOpInBoundsAccessChain:
    case kOpPhi:
    case kOpCopyObject:
    case kOpUndef:
    case kOpConstantComposite:
    case kOpConstantNull:
    case kOpFConvert:
    case kOpCooperativeMatrixLoadNV:
    case kOpCooperativeMatrixMulAddNV:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::vector<std::uint32_t> coopmat_nv_to_khr(std::span<const std::uint32_t> in, bool bf16) {
  if (in.size() < 5 || in[0] != kMagic) refuse("not a SPIR-V module");
  std::vector<Inst> insts;
  for (std::size_t at = 5; at < in.size();) {
    const std::uint32_t count = in[at] >> 16, op = in[at] & 0xffff;
    if (count == 0 || at + count > in.size()) refuse("an instruction runs past the module's end");
    const auto first = in.begin() + static_cast<std::ptrdiff_t>(at);
    insts.push_back({op, std::vector<std::uint32_t>(first + 1, first + count)});
    at += count;
  }
  std::uint32_t bound = in[3];

  // What the module declares: 32-bit integer and boolean constants, the f16 type, the unsigned
  // 32-bit integer type, the NV matrix types and the arrays of and pointers to them.
  std::map<std::uint32_t, std::uint32_t> int_constants;
  std::map<std::uint32_t, bool> bool_constants;
  std::set<std::uint32_t> int32_types;
  std::optional<std::uint32_t> half, uint32;
  std::map<std::uint32_t, std::uint32_t> component;  // NV matrix type -> its component type
  std::map<std::uint32_t, std::uint32_t> base;       // matrix, array or pointer type -> matrix
  for (const Inst& i : insts) {
    if (i.op == kOpTypeInt && i.w.size() == 3 && i.w[1] == 32) {
      int32_types.insert(i.w[0]);
      if (i.w[2] == 0) uint32 = i.w[0];
    } else if (i.op == kOpConstant && i.w.size() == 3 && int32_types.contains(i.w[0])) {
      int_constants[i.w[1]] = i.w[2];
    } else if ((i.op == kOpConstantTrue || i.op == kOpConstantFalse) && i.w.size() == 2) {
      bool_constants[i.w[1]] = i.op == kOpConstantTrue;
    } else if (i.op == kOpTypeFloat && i.w.size() == 2 && i.w[1] == 16) {
      half = i.w[0];
    } else if (i.op == kOpTypeCooperativeMatrixNV) {
      if (i.w.size() != 5) refuse("a malformed OpTypeCooperativeMatrixNV");
      if (!int_constants.contains(i.w[3]) || !int_constants.contains(i.w[4]))
        refuse("a matrix type whose extents are not constants");
      component[i.w[0]] = i.w[1];
      base[i.w[0]] = i.w[0];
    } else if ((i.op == kOpTypeArray || i.op == kOpTypeRuntimeArray) && i.w.size() >= 2 &&
               base.contains(i.w[1])) {
      base[i.w[0]] = base[i.w[1]];
    } else if (i.op == kOpTypePointer && i.w.size() == 3 && base.contains(i.w[2])) {
      base[i.w[0]] = base[i.w[2]];
    }
  }
  if (!half) refuse("no f16 type");
  if (!uint32) refuse("no 32-bit unsigned integer type");

  // f16 may appear as a matrix's component type only: bf16 has no arithmetic of its own.
  for (const Inst& i : insts) {
    if (!bf16) break;
    if (i.op == kOpTypeFloat || i.op == kOpTypeCooperativeMatrixNV || i.op == kOpName ||
        i.op == kOpMemberName || i.op == kOpDecorate || i.op == kOpMemberDecorate)
      continue;
    const bool names_type = i.op == kOpTypeVector || i.op == kOpTypeMatrix ||
                            i.op == kOpTypeArray || i.op == kOpTypeRuntimeArray ||
                            i.op == kOpTypeStruct || i.op == kOpTypeFunction;
    for (std::size_t k = 0; k < i.w.size(); ++k) {
      const bool type_operand = names_type               ? k >= 1
                                : i.op == kOpTypePointer ? k == 2
                                                         : !is_type(i.op) && k == 0;
      if (type_operand && i.w[k] == *half)
        refuse(fmt::format("f16 is used outside a matrix type (opcode {})", i.op));
    }
  }

  // Values and pointers of matrix types, in classes that must share one use: a load and its
  // pointer, a store's pointer and value, an access chain and its base, a phi and its inputs.
  std::map<std::uint32_t, std::uint32_t> type_of;  // such an id -> its (matrix-related) type
  std::map<std::uint32_t, std::uint32_t> parent;
  auto find = [&](std::uint32_t x) {
    while (parent.at(x) != x) x = parent[x] = parent.at(parent[x]);
    return x;
  };
  auto join = [&](std::uint32_t a, std::uint32_t b) {
    parent.try_emplace(a, a);
    parent.try_emplace(b, b);
    parent[find(a)] = find(b);
  };
  for (const Inst& i : insts) {
    const bool typed = !is_type(i.op) && i.w.size() >= 2 && base.contains(i.w[0]);
    if (typed) {
      if (!follows(i.op))
        refuse(fmt::format("a matrix value made by an instruction not followed (opcode {})", i.op));
      type_of[i.w[1]] = i.w[0];
      parent.try_emplace(i.w[1], i.w[1]);
    }
    if (!typed) {
      if (i.op == kOpStore && i.w.size() >= 2 && type_of.contains(i.w[1])) join(i.w[0], i.w[1]);
      continue;
    }
    if ((i.op == kOpLoad || i.op == kOpAccessChain || i.op == kOpInBoundsAccessChain ||
         i.op == kOpCopyObject) &&
        i.w.size() >= 3)
      join(i.w[1], i.w[2]);
    if (i.op == kOpPhi)
      for (std::size_t k = 2; k < i.w.size(); k += 2) join(i.w[1], i.w[k]);
  }
  // Each class's use, from the products (A and B operands, C and the result accumulators) and
  // the conversions of sums (accumulators both).
  std::map<std::uint32_t, std::uint32_t> class_use;
  auto mark = [&](std::uint32_t id, std::uint32_t u) {
    if (!type_of.contains(id)) refuse("a product's or conversion's operand is not followed");
    if (auto [it, fresh] = class_use.emplace(find(id), u); !fresh && it->second != u)
      refuse("one matrix value serves as two operands of products");
  };
  for (const Inst& i : insts) {
    if (i.op == kOpCooperativeMatrixMulAddNV) {
      if (i.w.size() != 5) refuse("a malformed OpCooperativeMatrixMulAddNV");
      mark(i.w[1], kUseAccumulator);
      mark(i.w[2], kUseA);
      mark(i.w[3], kUseB);
      mark(i.w[4], kUseAccumulator);
    }
    // Sums converted to the 16-bit type (to store them) stay accumulators.
    if (i.op == kOpFConvert && type_of.contains(i.w[1])) {
      mark(i.w[1], kUseAccumulator);
      mark(i.w[2], kUseAccumulator);
    }
  }
  // Each matrix type's uses: f32 types are accumulators; f16 types A or B operands or converted
  // sums. A type with several uses keeps the first (A, B, accumulator) and gives each other use
  // copies of it and of the arrays of and pointers to it, each declared after its original.
  std::map<std::uint32_t, std::set<std::uint32_t>> uses;
  for (const auto& [id, type] : type_of) {
    const auto it = class_use.find(find(id));
    if (it == class_use.end()) refuse("a matrix value that no product or conversion takes");
    uses[base.at(type)].insert(it->second);
  }
  std::map<std::uint32_t, std::uint32_t> use;  // matrix type -> the use of its KHR type
  for (const auto& [type, comp] : component) {
    const std::set<std::uint32_t>& u = uses[type];
    if (comp != *half && !u.empty() && u != std::set<std::uint32_t>{kUseAccumulator})
      refuse("an f32 matrix type as a product's A or B operand");
    if (comp == *half && u.empty()) refuse("an f16 matrix type that nothing takes");
    use[type] = u.empty() ? kUseAccumulator : *u.begin();
  }
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> copy;  // (use, type) -> copy
  for (const auto& [type, matrix] : base)
    for (const std::uint32_t u : uses[matrix])
      if (u != use.at(matrix)) copy[{u, type}] = bound++;
  std::map<std::uint32_t, std::uint32_t> retype;  // value or pointer -> its type's copy
  for (const auto& [id, type] : type_of)
    if (const auto it = copy.find({class_use.at(find(id)), type}); it != copy.end())
      retype[id] = it->second;

  // Three new unsigned constants (0, 1, 2: the uses and the layouts), after the integer type.
  const std::uint32_t c[3] = {bound, bound + 1, bound + 2};
  bound += 3;
  auto layout = [&](std::uint32_t column_major_flag) {
    const auto it = bool_constants.find(column_major_flag);
    if (it == bool_constants.end())
      refuse("a load's or store's column-major flag is not a constant");
    return c[it->second ? kColumnMajor : kRowMajor];
  };
  auto copied = [&](std::uint32_t u, std::uint32_t type) {
    const auto it = copy.find({u, type});
    return it == copy.end() ? type : it->second;
  };
  // After the declaration |i|, its copies for the uses its matrix type does not keep.
  auto copies = [&](const Inst& i, std::vector<Inst>& into) {
    const auto b = base.find(i.w[0]);
    if (b == base.end()) return;
    for (const std::uint32_t u : uses[b->second]) {
      const auto it = copy.find({u, i.w[0]});
      if (it == copy.end()) continue;
      Inst k = i;
      k.w[0] = it->second;
      if (i.op == kOpTypeCooperativeMatrixKHR) k.w[5] = c[u];
      if (i.op == kOpTypeArray || i.op == kOpTypeRuntimeArray) k.w[1] = copied(u, i.w[1]);
      if (i.op == kOpTypePointer) k.w[2] = copied(u, i.w[2]);
      into.push_back(std::move(k));
    }
  };

  std::vector<Inst> out;
  out.reserve(insts.size() + copy.size() + 6);
  bool extension_done = false;
  for (Inst i : insts) {
    if (follows(i.op) && i.w.size() >= 2)
      if (const auto it = retype.find(i.w[1]); it != retype.end()) i.w[0] = it->second;
    switch (i.op) {
      case kOpCapability:
        if (i.w.size() == 1 && i.w[0] == kCapCoopNV) {
          out.push_back({kOpCapability, {kCapCoopKHR}});
        } else if (bf16 && i.w.size() == 1 && i.w[0] == kCapFloat16) {
          out.push_back({kOpCapability, {kCapBFloat16Type}});
          out.push_back({kOpCapability, {kCapBFloat16CoopMatrix}});
        } else {
          out.push_back(i);
        }
        break;
      case kOpExtension:
        if (literal_string(i) == "SPV_NV_cooperative_matrix") {
          out.push_back({kOpExtension, string_words("SPV_KHR_cooperative_matrix")});
          if (bf16) out.push_back({kOpExtension, string_words("SPV_KHR_bfloat16")});
          extension_done = true;
        } else {
          out.push_back(i);
        }
        break;
      case kOpTypeInt:
        out.push_back(i);
        if (i.w[0] == *uint32)
          for (std::uint32_t v = 0; v < 3; ++v) out.push_back({kOpConstant, {*uint32, c[v], v}});
        break;
      case kOpTypeFloat:
        out.push_back(i);
        if (bf16 && i.w[0] == *half) out.back().w.push_back(kEncodingBFloat16);
        break;
      case kOpTypeCooperativeMatrixNV:
        out.push_back({kOpTypeCooperativeMatrixKHR,
                       {i.w[0], i.w[1], i.w[2], i.w[3], i.w[4], c[use.at(i.w[0])]}});
        copies(Inst(out.back()), out);
        break;
      case kOpTypeArray:
      case kOpTypeRuntimeArray:
      case kOpTypePointer:
        out.push_back(i);
        copies(i, out);
        break;
      case kOpCooperativeMatrixLoadNV: {  // [type, result, pointer, stride, column major, ...]
        if (i.w.size() < 5) refuse("a malformed OpCooperativeMatrixLoadNV");
        Inst k{kOpCooperativeMatrixLoadKHR, {i.w[0], i.w[1], i.w[2], layout(i.w[4]), i.w[3]}};
        k.w.insert(k.w.end(), i.w.begin() + 5, i.w.end());
        out.push_back(std::move(k));
        break;
      }
      case kOpCooperativeMatrixStoreNV: {  // [pointer, object, stride, column major, ...]
        if (i.w.size() < 4) refuse("a malformed OpCooperativeMatrixStoreNV");
        Inst k{kOpCooperativeMatrixStoreKHR, {i.w[0], i.w[1], layout(i.w[3]), i.w[2]}};
        k.w.insert(k.w.end(), i.w.begin() + 4, i.w.end());
        out.push_back(std::move(k));
        break;
      }
      case kOpCooperativeMatrixMulAddNV:
        out.push_back({kOpCooperativeMatrixMulAddKHR, i.w});
        break;
      case kOpCooperativeMatrixLengthNV:
        out.push_back({kOpCooperativeMatrixLengthKHR, i.w});
        break;
      default:
        out.push_back(i);
    }
  }
  if (!extension_done) refuse("the module does not declare SPV_NV_cooperative_matrix");

  std::vector<std::uint32_t> words(in.begin(), in.begin() + 5);
  words[3] = bound;
  for (const Inst& i : out) {
    words.push_back(static_cast<std::uint32_t>(i.w.size() + 1) << 16 | i.op);
    words.insert(words.end(), i.w.begin(), i.w.end());
  }
  return words;
}

}  // namespace tessera::vulkan

// The oracle's cases for scaled_dot_product_attention (dropout 0: its mask is Tessera's own).
// compare.py's CASES has the torch side of each, under the same name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;

std::vector<Case> attention_cases() {
  return {
      {"sdpa",
       OpId::scaled_dot_product_attention,
       {randn({2, 3, 5, 4}), randn({2, 3, 6, 4}), randn({2, 3, 6, 3})},
       [](const Vars& x) { return tt::scaled_dot_product_attention(x[0], x[1], x[2]); }},
      {"sdpa_causal",
       OpId::scaled_dot_product_attention,
       {randn({1, 2, 7, 8}), randn({1, 2, 7, 8}), randn({1, 2, 7, 8})},
       [](const Vars& x) { return tt::scaled_dot_product_attention(x[0], x[1], x[2], 0.0, true); }},
      // L < S, causal (top-left aligned), an explicit scale, three leading dims.
      {"sdpa_causal_scale",
       OpId::scaled_dot_product_attention,
       {randn({2, 1, 2, 5, 16}), randn({2, 1, 2, 9, 16}), randn({2, 1, 2, 9, 5})},
       [](const Vars& x) {
         return tt::scaled_dot_product_attention(x[0], x[1], x[2], 0.0, true, 0.3);
       }},
      {"sdpa_long",
       OpId::scaled_dot_product_attention,
       {randn({1, 1, 67, 32}), randn({1, 1, 130, 32}), randn({1, 1, 130, 32})},
       [](const Vars& x) { return tt::scaled_dot_product_attention(x[0], x[1], x[2]); }},
  };
}

}  // namespace tessera::oracle

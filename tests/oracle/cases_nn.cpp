// The oracle's cases for the nn ops of the op set: batched matmul, embedding, average pooling
// and grouped/dilated convolution. compare.py's CASES has the torch side of each, under the same
// name.
#include "oracle.h"
#include "tessera/ops.h"

namespace tessera::oracle {

namespace tt = tessera::train;

std::vector<Case> nn_cases() {
  return {
      {"bmm",
       OpId::bmm,
       {randn({3, 4, 5}), randn({3, 5, 2})},
       [](const Vars& x) { return tt::bmm(x[0], x[1]); }},
      {"bmm_trans",
       OpId::bmm,
       {randn({2, 5, 4}), randn({2, 3, 5})},
       [](const Vars& x) { return tt::bmm(x[0], x[1], true, true); }},
      {"matmul_broadcast_batch",
       OpId::bmm,
       {randn({2, 1, 3, 6}), randn({4, 6, 5})},
       [](const Vars& x) { return tt::matmul(x[0], x[1]); }},
      {"matmul_batch_view",
       OpId::bmm,
       {randn({2, 3, 7}), randn({2, 5, 7})},
       [](const Vars& x) { return tt::matmul(x[0], tt::transpose(x[1], 1, 2)); }},
      {"embedding",
       OpId::embedding,
       {randn({10, 6}), labels({3, 7}, 10)},
       [](const Vars& x) { return tt::embedding(x[0], x[1].value()); }},
      {"embedding_padding_i64",
       OpId::embedding,
       {randn({8, 5}), labels64({20}, 8)},
       [](const Vars& x) { return tt::embedding(x[0], x[1].value(), 2); }},
      {"avg_pool2d",
       OpId::avg_pool2d,
       {randn({2, 3, 8, 8})},
       [](const Vars& x) { return tt::avg_pool2d(x[0]); }},
      {"avg_pool2d_k3_s2_pad1",
       OpId::avg_pool2d,
       {randn({1, 2, 9, 7})},
       [](const Vars& x) {
         return tt::avg_pool2d(x[0], AvgPool2dAttrs{3, 3, 2, 2, 1, 1, true});
       }},
      {"avg_pool2d_exclude_pad",
       OpId::avg_pool2d,
       {randn({1, 2, 9, 7})},
       [](const Vars& x) {
         return tt::avg_pool2d(x[0], AvgPool2dAttrs{3, 3, 2, 2, 1, 1, false});
       }},
      {"adaptive_avg_pool2d",
       OpId::adaptive_avg_pool2d,
       {randn({2, 3, 7, 9})},
       [](const Vars& x) { return tt::adaptive_avg_pool2d(x[0], 3, 4); }},
      {"adaptive_avg_pool2d_1x1",
       OpId::adaptive_avg_pool2d,
       {randn({2, 5, 6, 6})},
       [](const Vars& x) { return tt::adaptive_avg_pool2d(x[0], 1, 1); }},
      {"conv2d_groups",
       OpId::conv2d,
       {randn({2, 4, 7, 7}), randn({6, 2, 3, 3})},
       [](const Vars& x) {
         return tt::conv2d(x[0], x[1], Conv2dAttrs{1, 1, 1, 1, 1, 1, 2});
       }},
      {"conv2d_depthwise",
       OpId::conv2d,
       {randn({2, 3, 8, 8}), randn({3, 1, 3, 3})},
       [](const Vars& x) {
         return tt::conv2d(x[0], x[1], Conv2dAttrs{2, 2, 1, 1, 1, 1, 3});
       }},
      {"conv2d_dilation",
       OpId::conv2d,
       {randn({1, 2, 9, 9}), randn({3, 2, 3, 3})},
       [](const Vars& x) {
         return tt::conv2d(x[0], x[1], Conv2dAttrs{1, 1, 2, 2, 2, 2, 1});
       }},
  };
}

}  // namespace tessera::oracle

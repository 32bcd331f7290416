// The i64 and bool dtypes in safetensors files: written under safetensors' names (I64, BOOL) and
// read back bit for bit, on cpu:0.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <unistd.h>

#include "tessera/tessera.h"
#include "tessera/train/safetensors.h"

using namespace tessera;
namespace fs = std::filesystem;

TEST(TensorIo, I64AndBoolRoundTripThroughSafetensors) {
  Device& cpu = device("cpu");
  const fs::path path =
      fs::temp_directory_path() / fmt::format("tessera-io-{}.safetensors", getpid());
  const std::vector<std::int64_t> ids{-(std::int64_t{1} << 40), 0, 7};
  const std::vector<std::uint8_t> mask{1, 0, 1, 1};
  train::save_safetensors(path, {{"ids", Tensor::from<std::int64_t>(ids, {3}, &cpu)},
                                 {"mask", Tensor::from_mask(mask, {2, 2}, &cpu)}});
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("\"I64\""), std::string::npos);
  EXPECT_NE(bytes.find("\"BOOL\""), std::string::npos);
  const train::SafetensorsContents c = train::load_safetensors(path, &cpu);
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].second.dtype(), DType::i64);
  EXPECT_EQ(c.tensors[0].second.to_vector<std::int64_t>(), ids);
  EXPECT_EQ(c.tensors[1].second.dtype(), DType::boolean);
  EXPECT_EQ(c.tensors[1].second.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.tensors[1].second.to_vector<std::uint8_t>(), mask);
  fs::remove(path);
}

// Crafted files given to the readers of outside bytes: tessera/file.h's RegularFile and
// read_regular_file, and load_safetensors (model files and checkpoints). Each gives a FileError
// naming the file and what is wrong, never a crash, a wrap, a hang or a runaway allocation.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "input_files.h"
#include "tessera/errors.h"
#include "tessera/file.h"
#include "tessera/runtime.h"
#include "tessera/train/safetensors.h"

using namespace tessera;
using namespace tessera::train;
using tessera::testing::fifo_error;
using tessera::testing::file_error;
using tessera::testing::TempDir;
namespace fs = std::filesystem;

namespace {

Device& cpu() {
  return tessera::device("cpu:0");
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// The 8 little-endian bytes of |n|.
std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int b = 0; b < 8; ++b) s[static_cast<std::size_t>(b)] = static_cast<char>(n >> (8 * b));
  return s;
}

// A safetensors file: the length of |header|, the header, then |data|.
std::string safetensors(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

}  // namespace

TEST(RegularFile, ReadsRegularFilesAndRefusesEverythingElse) {
  TempDir dir("files");
  const fs::path p = dir.path() / "a";
  write_bytes(p, "hello world");
  EXPECT_EQ(read_regular_file(p, 100, "test file"), "hello world");
  RegularFile f(p);
  EXPECT_EQ(f.size(), 11u);
  char buf[5];
  f.read_at(6, buf, 5);
  EXPECT_EQ(std::string(buf, 5), "world");
  std::string msg = file_error([&] { f.read_at(7, buf, 5); });
  EXPECT_NE(msg.find(p.string() + ": truncated: 5 bytes at offset 7 run past the end of the "
                                  "11-byte file"),
            std::string::npos)
      << msg;
  msg = file_error([&] { read_regular_file(p, 10, "test file"); });
  EXPECT_NE(
      msg.find(p.string() + ": the test file is 11 B, more than the 10 B this reader accepts"),
      std::string::npos)
      << msg;

  msg = file_error([&] { RegularFile{dir.path() / "missing"}; });
  EXPECT_NE(msg.find((dir.path() / "missing").string() + ": no such file"), std::string::npos)
      << msg;
  msg = file_error([&] { RegularFile{dir.path()}; });
  EXPECT_NE(msg.find(dir.path().string() + ": is a directory, not a regular file"),
            std::string::npos)
      << msg;
  msg = file_error([&] { read_regular_file("/dev/zero", 100, "test file"); });
  EXPECT_NE(msg.find("/dev/zero: is a character device, not a regular file"), std::string::npos)
      << msg;
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  msg = fifo_error([&] { read_regular_file(fifo, 100, "test file"); }, fifo);
  EXPECT_NE(msg.find(fifo.string() + ": is a FIFO, not a regular file"), std::string::npos) << msg;
}

// A FIFO named as a model file or checkpoint blocked forever; a directory gave
// "basic_filebuf::underflow ... Is a directory".
TEST(SafetensorsInput, OnlyRegularFilesAreOpened) {
  TempDir dir("files");
  const fs::path fifo = dir.path() / "epoch-0001.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The runtime loads on this thread, not on fifo_error's: the drivers it loads (LLVM inside
  // lavapipe and PoCL, when they compile) give the loading thread a signal stack of their own,
  // which AddressSanitizer then fails to unmap when that short-lived thread ends.
  Device& dev = cpu();
  std::string msg = fifo_error([&] { load_safetensors(fifo, &dev); }, fifo);
  EXPECT_NE(msg.find(fifo.string() + ": is a FIFO, not a regular file"), std::string::npos) << msg;
  msg = file_error([&] { load_safetensors(dir.path(), &cpu()); });
  EXPECT_NE(msg.find(dir.path().string() + ": is a directory, not a regular file"),
            std::string::npos)
      << msg;
}

TEST(SafetensorsInput, CraftedHeadersNameTheFileTheEntryAndTheProblem) {
  TempDir dir("files");
  const fs::path p = dir.path() / "bad.safetensors";
  auto expect = [&](const std::string& file, const std::string& what) {
    write_bytes(p, file);
    const std::string msg = file_error([&] { load_safetensors(p, &cpu()); });
    EXPECT_NE(msg.find(p.string() + ": not a valid safetensors file: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  const std::string f32x2(8, '\0');
  // Extents: 512.5 was converted to 512; negative and non-numeric ones are refused too.
  expect(safetensors(R"({"w":{"dtype":"U8","shape":[512.5],"data_offsets":[0,512]}})",
                     std::string(512, '\0')),
         "tensor 'w': extent 0 of shape [512.5] is not an integer");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2),
         "tensor 'w': extent 0 of shape [-2] is negative");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", f32x2),
         "tensor 'w': extent 0 of shape [\"2\"] is not a number (string)");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})",
                     f32x2),
         "does not fit in 64 bits");
  // A shape whose element or byte count passes 64 bits (it wrapped before).
  expect(
      safetensors(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      "tensor 'w': F32 [4294967296,4294967296] holds more bytes than 64 bits can count");
  expect(
      safetensors(R"({"w":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,0]}})"),
      "holds more bytes than 64 bits can count");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2,3,1,1,1,1,1],"data_offsets":[0,24]}})"),
         "shape has 7 dimensions (at most 6)");
  // data_offsets.
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", f32x2),
         "tensor 'w': data_offsets [-8,0]: begin is negative");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", f32x2),
         "data_offsets [0,8.0]: end is not an integer");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f32x2),
         "data_offsets [0] is not [begin, end]");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", f32x2),
         "data_offsets [8,16] lie outside the 8-byte data");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", f32x2),
         "data_offsets [8,0] lie outside the 8-byte data");
  // dtypes, entries, metadata.
  expect(safetensors(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", f32x2),
         "tensor 'w': dtype is not a string (number)");
  expect(safetensors(R"({"w":[1,2]})"), "entry 'w' is malformed: not an object (array)");
  expect(safetensors(R"({"__metadata__":{"k":1}})"), "metadata 'k' is not a string");
  // Duplicates: the JSON parser kept the last silently.
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                     f32x2),
         "entry 'w' is repeated");
  expect(
      safetensors(R"({"w":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,8]}})", f32x2),
      "entry 'w' repeats key 'dtype'");
  expect(safetensors(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", f32x2),
         "header nests deeper than name -> entry -> shape");
}

TEST(SafetensorsInput, HeaderLengthIsCheckedAgainstTheFileAndALimit) {
  TempDir dir("files");
  const fs::path p = dir.path() / "len.safetensors";
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  // The length claims the header, the data and one byte more.
  write_bytes(p, le64(header.size() + data.size() + 1) + header + data);
  const std::string expected =
      fmt::format("header length {} runs past the end of the {}-byte file",
                  header.size() + data.size() + 1, 8 + header.size() + data.size());
  std::string msg = file_error([&] { load_safetensors(p, &cpu()); });
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  // A 101 MiB header in a (sparse) file that long: refused by the limit, before it is read.
  const std::uint64_t n = std::uint64_t{101} << 20;
  write_bytes(p, le64(n));
  fs::resize_file(p, 8 + n);
  msg = file_error([&] { load_safetensors(p, &cpu()); });
  EXPECT_NE(msg.find("header length 105906176 is more than the 100.0 MiB this reader accepts"),
            std::string::npos)
      << msg;
}

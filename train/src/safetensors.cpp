#include "tessera/train/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/errors.h"
#include "tessera/file.h"

namespace tessera::train {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::f32, "F32"},   {DType::f64, "F64"}, {DType::f16, "F16"},
                                 {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::u8, "U8"}};

const char* st_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  throw InvalidArgument(
      fmt::format("safetensors: dtype {} has no safetensors name", dtype_name(t)));
}

// Host bytes of |t| in row-major order.
std::string host_bytes(const Tensor& t) {
  std::string bytes(t.nbytes(), '\0');
  if (!bytes.empty()) t.copy_to_host(bytes.data(), bytes.size(), t.dtype());
  return bytes;
}

}  // namespace

void save_safetensors(const fs::path& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> names;
  std::string data;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__" || !names.insert(name).second)
      throw InvalidArgument(
          fmt::format("safetensors: tensor name '{}' is empty, reserved or repeated", name));
    if (!t.defined())
      throw InvalidArgument(fmt::format("safetensors: tensor '{}' is undefined", name));
    const std::size_t begin = data.size();
    data += host_bytes(t);
    json shape = json::array();
    for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
    header[name] = {
        {"dtype", st_name(t.dtype())}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string file(8, '\0');
  std::uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  file += h;
  file += data;
  write_file_atomic(path, file);
}

SafetensorsContents load_safetensors(const fs::path& path, Device* device) {
  auto bad = [&](const std::string& what) {
    return FileError(fmt::format("{}: not a valid safetensors file: {}", path.string(), what));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw FileError(fmt::format("{}: can not open: {}", path.string(), std::strerror(errno)));
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 8)
    throw bad(fmt::format("{} bytes, shorter than the 8-byte header length", file.size()));
  std::uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i)
    hlen |=
        static_cast<std::uint64_t>(static_cast<unsigned char>(file[static_cast<std::size_t>(i)]))
        << (8 * i);
  if (hlen > file.size() - 8)
    throw bad(
        fmt::format("header length {} runs past the end of the {}-byte file", hlen, file.size()));
  json header;
  try {
    header = json::parse(file.substr(8, hlen));
  } catch (const json::exception& e) {
    throw bad(fmt::format("header is not JSON ({})", e.what()));
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const std::size_t data_start = 8 + hlen, data_size = file.size() - data_start;

  SafetensorsContents out;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw bad("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string())
          throw bad(fmt::format("metadata '{}' is not a string", m.key()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    try {
      const std::string dt = e.at("dtype").get<std::string>();
      const auto* d = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                   [&](const DTypeName& x) { return dt == x.name; });
      if (d == std::end(kDTypes))
        throw bad(fmt::format("tensor '{}' has unsupported dtype '{}'", name, dt));
      Shape shape;
      const auto dims = e.at("shape").get<std::vector<std::int64_t>>();
      if (dims.size() > static_cast<std::size_t>(kMaxDims))
        throw bad(
            fmt::format("tensor '{}' has {} dimensions (at most {})", name, dims.size(), kMaxDims));
      for (std::int64_t v : dims) {
        if (v < 0) throw bad(fmt::format("tensor '{}' has a negative extent", name));
        shape.push_back(v);
      }
      const auto offs = e.at("data_offsets").get<std::vector<std::size_t>>();
      if (offs.size() != 2 || offs[0] > offs[1] || offs[1] > data_size)
        throw bad(
            fmt::format("tensor '{}' has data_offsets outside the {}-byte data", name, data_size));
      const std::size_t want = static_cast<std::size_t>(shape.numel()) * dtype_size(d->dtype);
      if (offs[1] - offs[0] != want)
        throw bad(fmt::format("tensor '{}' {} {} needs {} bytes, data_offsets give {}", name, dt,
                              shape.str(), want, offs[1] - offs[0]));
      ranges.emplace_back(offs[0], offs[1]);
      out.tensors.emplace_back(name, Tensor::from_bytes(file.data() + data_start + offs[0], want,
                                                        shape, d->dtype, device));
    } catch (const json::exception& ex) {
      throw bad(fmt::format("entry '{}' is malformed ({})", name, ex.what()));
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw bad("tensor data ranges overlap");
  return out;
}

}  // namespace tessera::train

#include "tessera/train/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/checked.h"
#include "tessera/errors.h"
#include "tessera/file.h"

namespace tessera::train {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// The longest header accepted (the reference implementation's limit is 100 MB).
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i32, "I32"}, {DType::u8, "U8"},   {DType::i64, "I64"}, {DType::boolean, "BOOL"}};

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

namespace {

// What one header entry says, checked before any tensor data is read.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

// A non-negative JSON integer, or a message saying what |v| is instead.
std::optional<std::uint64_t> json_count(const json& v, std::string& why) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  why = v.is_number_integer() ? "negative"
        : v.is_number()       ? "not an integer"
                              : fmt::format("not a number ({})", v.type_name());
  return std::nullopt;
}

}  // namespace

SafetensorsContents load_safetensors(const fs::path& path, Device* device) {
  auto bad = [&](const std::string& what) {
    return FileError(fmt::format("{}: not a valid safetensors file: {}", path.string(), what));
  };
  const RegularFile file(path);  // refuses FIFOs, directories and devices without blocking
  const std::uint64_t size = file.size();
  if (size < 8) throw bad(fmt::format("{} bytes, shorter than the 8-byte header length", size));
  unsigned char len[8];
  file.read_at(0, len, 8);
  std::uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= std::uint64_t{len[i]} << (8 * i);
  if (hlen > size - 8)
    throw bad(fmt::format("header length {} runs past the end of the {}-byte file", hlen, size));
  if (hlen > kMaxHeaderBytes)
    throw bad(fmt::format("header length {} is more than the {} this reader accepts", hlen,
                          format_bytes(kMaxHeaderBytes)));
  std::string text(static_cast<std::size_t>(hlen), '\0');
  file.read_at(8, text.data(), text.size());

  // The header is at most three levels deep (the object of entries, an entry, its shape), and no
  // object repeats a key (the JSON parser would keep the last one silently).
  std::vector<std::set<std::string>> keys;
  std::string parsing;  // the top-level key being parsed
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= 3) throw bad("header nests deeper than name -> entry -> shape");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (depth == 1) parsing = key;
        if (!keys.back().insert(key).second)
          throw bad(depth == 1 ? fmt::format("entry '{}' is repeated", key)
                               : fmt::format("entry '{}' repeats key '{}'", parsing, key));
        break;
      }
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, check);
  } catch (const json::exception& e) {
    throw bad(fmt::format("header is not JSON ({})", e.what()));
  }
  text = std::string();
  if (!header.is_object()) throw bad("header is not a JSON object");
  const std::uint64_t data_start = 8 + hlen, data_size = size - data_start;

  SafetensorsContents out;
  std::vector<Entry> entries;
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
    auto wrong = [&](const std::string& what) {
      return bad(fmt::format("tensor '{}': {}", name, what));
    };
    if (!e.is_object())
      throw bad(fmt::format("entry '{}' is malformed: not an object ({})", name, e.type_name()));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!e.contains(field))
        throw bad(fmt::format("entry '{}' is malformed: it has no '{}'", name, field));
    const json& dt = e["dtype"];
    if (!dt.is_string()) throw wrong(fmt::format("dtype is not a string ({})", dt.type_name()));
    const auto* d = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                 [&](const DTypeName& x) { return dt == x.name; });
    if (d == std::end(kDTypes))
      throw wrong(fmt::format("unsupported dtype '{}'", dt.get<std::string>()));
    Entry entry{name, d->dtype, {}, 0, 0};
    const json& dims = e["shape"];
    if (!dims.is_array()) throw wrong(fmt::format("shape is not an array ({})", dims.type_name()));
    if (dims.size() > static_cast<std::size_t>(kMaxDims))
      throw wrong(fmt::format("shape has {} dimensions (at most {})", dims.size(), kMaxDims));
    for (std::size_t i = 0; i < dims.size(); ++i) {
      std::string why;
      const std::optional<std::uint64_t> v = json_count(dims[i], why);
      if (!v) throw wrong(fmt::format("extent {} of shape {} is {}", i, dims.dump(), why));
      if (*v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw wrong(fmt::format("extent {} of shape {} does not fit in 64 bits", i, dims.dump()));
      entry.shape.push_back(static_cast<std::int64_t>(*v));
    }
    const std::optional<std::int64_t> numel =
        checked_numel(std::span<const std::int64_t>(entry.shape.begin(), entry.shape.end()));
    const std::optional<std::size_t> want =
        numel ? checked_bytes(*numel, dtype_size(entry.dtype)) : std::nullopt;
    if (!want)
      throw wrong(
          fmt::format("{} {} holds more bytes than 64 bits can count", d->name, dims.dump()));
    const json& offs = e["data_offsets"];
    if (!offs.is_array() || offs.size() != 2)
      throw wrong(fmt::format("data_offsets {} is not [begin, end]", offs.dump()));
    std::uint64_t range[2];
    for (std::size_t i = 0; i < 2; ++i) {
      std::string why;
      const std::optional<std::uint64_t> v = json_count(offs[i], why);
      if (!v)
        throw wrong(
            fmt::format("data_offsets {}: {} is {}", offs.dump(), i ? "end" : "begin", why));
      range[i] = *v;
    }
    entry.begin = range[0];
    entry.end = range[1];
    if (entry.begin > entry.end || entry.end > data_size)
      throw wrong(
          fmt::format("data_offsets {} lie outside the {}-byte data", offs.dump(), data_size));
    if (entry.end - entry.begin != *want)
      throw wrong(fmt::format("{} {} needs {} bytes, data_offsets give {}", d->name,
                              entry.shape.str(), *want, entry.end - entry.begin));
    entries.push_back(std::move(entry));
  }
  header = json();

  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const Entry& e : entries) ranges.emplace_back(e.begin, e.end);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw bad("tensor data ranges overlap");

  // Every range now lies inside the file, so no buffer is larger than the file.
  std::string bytes;
  for (const Entry& e : entries) {
    bytes.resize(static_cast<std::size_t>(e.end - e.begin));
    file.read_at(data_start + e.begin, bytes.data(), bytes.size());
    out.tensors.emplace_back(
        e.name, Tensor::from_bytes(bytes.data(), bytes.size(), e.shape, e.dtype, device));
  }
  return out;
}

}  // namespace tessera::train

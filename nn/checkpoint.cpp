#include "nn/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "nn/json.h"

namespace qkv::nn {

static_assert(std::endian::native == std::endian::little, "qkv's safetensors I/O assumes a little-endian host");

namespace detail {
std::function<void(const std::string&)> before_rename;
}

namespace {

constexpr uint64_t kMaxHeader = 100 << 20;  // as the safetensors library's limit

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType& out) {
  for (DType d : {DType::Float32, DType::Float64, DType::Int64, DType::Bool})
    if (name == safetensors_dtype(d)) return out = d, true;
  return false;
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    QKV_CHECK(n > 0, "cannot write ", path, ": ", std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

Tensor TensorFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return Tensor();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) header += "\"__metadata__\":" + json_object(metadata);
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(!name.empty() && name != "__metadata__" && names.insert(name).second, "save_safetensors ", path,
          ": bad or repeated tensor name '", name, "'");
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * element_size(t.dtype());
    std::string dims;
    for (int64_t s : t.shape()) {
      if (!dims.empty()) dims += ',';
      dims += std::to_string(s);
    }
    if (header.size() > 1) header += ",";
    header += json_quote(name) + ":{\"dtype\":\"" + safetensors_dtype(t.dtype()) + "\",\"shape\":[" + dims +
              "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint64_t length = header.size();

  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", tmp, ": ", std::strerror(errno));
  try {
    write_all(fd, &length, 8, tmp);  // little-endian, as asserted above
    write_all(fd, header.data(), header.size(), tmp);
    for (const auto& [name, t] : tensors) write_all(fd, t.raw_data(), t.numel() * element_size(t.dtype()), tmp);
    QKV_CHECK(::fsync(fd) == 0, "cannot flush ", tmp, ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (detail::before_rename) detail::before_rename(tmp);
  QKV_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

TensorFile load_safetensors(const std::string& path) {
  auto fail = [&](const std::string& what) { return Error(cat(path, ": ", what)); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail(cat("cannot open: ", std::strerror(errno)));
  std::string bytes;  // read in blocks (a character iterator took milliseconds per megabyte)
  for (char block[1 << 16]; in.read(block, sizeof block) || in.gcount() > 0;) bytes.append(block, in.gcount());
  if (bytes.size() < 8) throw fail(cat("truncated: ", bytes.size(), " bytes, a safetensors file has at least 8"));
  uint64_t length;
  std::memcpy(&length, bytes.data(), 8);
  if (length > bytes.size() - 8)
    throw fail(cat("header length ", length, " runs past the end of the file (", bytes.size(), " bytes)"));
  if (length > kMaxHeader) throw fail(cat("header length ", length, " is larger than ", kMaxHeader));
  Json header;
  try {
    header = parse_json(std::string_view(bytes).substr(8, length));
  } catch (const Error& e) {
    throw fail(cat("bad header: ", e.what()));
  }
  if (header.kind != Json::Kind::Object) throw fail("bad header: not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - length;
  const char* data = bytes.data() + 8 + length;

  TensorFile file;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.object) {
    if (name == "__metadata__") {
      if (entry.kind != Json::Kind::Object) throw fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.object) {
        if (v.kind != Json::Kind::String) throw fail(cat("__metadata__ value of '", k, "' is not a string"));
        file.metadata[k] = v.string;
      }
      continue;
    }
    const Json* dtype = entry.find("dtype");
    const Json* shape = entry.find("shape");
    const Json* offsets = entry.find("data_offsets");
    if (entry.kind != Json::Kind::Object || !dtype || !shape || !offsets)
      throw fail(cat("tensor '", name, "' lacks dtype, shape or data_offsets"));
    DType dt;
    if (dtype->kind != Json::Kind::String || !dtype_from_name(dtype->string, dt))
      throw fail(cat("tensor '", name, "' has unsupported dtype ", dtype->kind == Json::Kind::String ? dtype->string : "?",
                     " (qkv reads F32, F64, I64, BOOL)"));
    if (shape->kind != Json::Kind::Array) throw fail(cat("tensor '", name, "' has a shape that is not a list"));
    Shape dims;
    uint64_t count = 1;
    for (const Json& d : shape->array) {
      if (!d.is_integer || d.integer < 0) throw fail(cat("tensor '", name, "' has a bad size in its shape"));
      dims.push_back(d.integer);
      if (__builtin_mul_overflow(count, static_cast<uint64_t>(d.integer), &count) || count > (uint64_t{1} << 40))
        throw fail(cat("tensor '", name, "' is too large"));
    }
    if (offsets->kind != Json::Kind::Array || offsets->array.size() != 2 || !offsets->array[0].is_integer ||
        !offsets->array[1].is_integer || offsets->array[0].integer < 0 ||
        offsets->array[1].integer < offsets->array[0].integer)
      throw fail(cat("tensor '", name, "' has bad data_offsets"));
    uint64_t begin = offsets->array[0].integer, end = offsets->array[1].integer;
    if (end > data_size)
      throw fail(cat("tensor '", name, "' data_offsets [", begin, ", ", end, ") run past the data (", data_size, " bytes)"));
    if (end - begin != count * element_size(dt))
      throw fail(cat("tensor '", name, "' holds ", end - begin, " bytes but ", safetensors_dtype(dt), " ",
                     shape_str(dims), " needs ", count * element_size(dt)));
    Tensor t = Tensor::empty(dims, dt);
    std::memcpy(t.raw_data(), data + begin, end - begin);
    if (dt == DType::Bool)  // only 0 and 1 are valid bools
      for (int64_t i = 0; i < t.numel(); ++i)
        if (static_cast<unsigned char>(data[begin + i]) > 1) throw fail(cat("tensor '", name, "' has a bool that is not 0 or 1"));
    file.tensors.emplace_back(name, t);
    spans.push_back({begin, end, name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t covered = 0;
  for (const Span& s : spans) {
    if (s.begin < covered) throw fail(cat("tensor '", s.name, "' overlaps the one before it"));
    if (s.begin > covered) throw fail(cat("bytes [", covered, ", ", s.begin, ") of the data belong to no tensor"));
    covered = s.end;
  }
  if (covered != data_size) throw fail(cat("bytes [", covered, ", ", data_size, ") of the data belong to no tensor"));
  return file;
}

void save_module(const std::string& path, const Module& module, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.named_parameters(), metadata);
}

void load_into(Module& module, const TensorFile& file, const std::string& path,
               const std::vector<std::string>& ignored_prefixes) {
  auto ignored = [&](const std::string& name) {
    return std::any_of(ignored_prefixes.begin(), ignored_prefixes.end(),
                       [&](const std::string& p) { return name.compare(0, p.size(), p) == 0; });
  };
  auto params = module.named_parameters();
  std::set<std::string> expected;
  for (const auto& [name, p] : params) {
    expected.insert(name);
    Tensor t = file.get(name);
    QKV_CHECK(t.defined(), path, ": missing tensor '", name, "'");
    QKV_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype(), path, ": tensor '", name, "' is ", dtype_name(t.dtype()),
          " ", shape_str(t.shape()), " but the model expects ", dtype_name(p.dtype()), " ", shape_str(p.shape()));
  }
  for (const auto& [name, t] : file.tensors)
    QKV_CHECK(expected.count(name) || ignored(name), path, ": unexpected tensor '", name, "'");
  for (const auto& [name, p] : params) p.assign_(file.get(name));
}

}  // namespace qkv::nn

#include "io/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>

#include "io/file_io.h"
#include "io/metadata.h"
#include "io/output.h"
#include "io/strict_json.h"

namespace qkv::io {

static_assert(std::endian::native == std::endian::little, "qkv's safetensors I/O assumes a little-endian host");

namespace detail {
std::function<void(const std::string&)> before_rename;
}

namespace {

// A header holds ~120 bytes per tensor: 4 MiB fits 35,000 tensors. The
// largest model qkv builds (128 layers, a Seq2Seq with Adam's moments:
// 16,000 tensors) needs under 2 MiB; a 12-layer GPT's training checkpoint
// needs 70 KB. Parsing costs ~0.2 s per MiB of tiny entries here (nlohmann's
// DOM allocates per value), so the cap also bounds the time to reject.
constexpr uint64_t kMaxHeader = 4 << 20;

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

// A dtype a file may hold: qkv's own, or a 16-bit float (Hugging Face's
// float16 and bfloat16 checkpoints) read into float32. `bytes` is an
// element's size in the file.
bool stored_dtype(const std::string& name, DType& out, uint64_t& bytes) {
  if (name == "F16" || name == "BF16") return out = DType::Float32, bytes = 2, true;
  if (!dtype_from_name(name, out)) return false;
  bytes = element_size(out);
  return true;
}

}  // namespace

// IEEE binary16 -> float32, exactly (every half is a float): subnormals, infinities and NaNs included.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (its payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // ±0
  } else {        // subnormal: mantissa · 2^-24, normal as a float
    int shift = std::countl_zero(static_cast<uint32_t>(mantissa)) - 21;  // moves the leading 1 to bit 10
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa << shift) & 0x3ffu) << 13;
  }
  return std::bit_cast<float>(bits);
}

// bfloat16 is float32's top half.
float bfloat16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

namespace {

std::string quoted(const std::string& name, const std::string& path) {
  try {
    return nlohmann::json(name).dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(cat("save_safetensors ", path, ": tensor name '", printable(name), "' is not valid UTF-8"));
  }
}

}  // namespace

void check_writable_target(const std::string& path, bool probe) {
  QKV_CHECK(!path.empty(), "no file name given to write");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    const char* kind = S_ISLNK(st.st_mode)    ? "a symbolic link"
                       : S_ISDIR(st.st_mode)  ? "a folder"
                       : !S_ISREG(st.st_mode) ? "not a regular file (a device, pipe or socket)"
                                              : nullptr;
    QKV_CHECK(!kind, "refusing to write ", printable(path), ": it is ", kind);
  } else {
    QKV_CHECK(errno == ENOENT, "cannot write ", printable(path), ": ", std::strerror(errno));
  }
  if (!probe) return;
  // Create (and remove) this process's temporary: exactly what saving will need.
  std::string tmp = temporary_beside(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", printable(path), ": ", std::strerror(errno));
  ::close(fd);
  std::remove(tmp.c_str());
}

// Named, not anonymous: FileReader::Impl holds one (GCC warns of a member whose type has internal linkage
// when the unity build includes this file).
namespace regular_file {
// An open regular file (a FIFO would block, /dev/zero never end) of at most max_bytes, and its size; closed
// with the object.
struct RegularFile {
  int fd = -1;
  int64_t size = 0;
  std::string shown;  // the path, printable
  RegularFile(const std::string& path, int64_t max_bytes, const char* what) : shown(printable(path)) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    QKV_CHECK(fd >= 0, shown, ": cannot open: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int error = errno;
      ::close(fd);
      throw Error(cat(shown, ": cannot read: ", std::strerror(error)));
    }
    size = st.st_size;
    if (!S_ISREG(st.st_mode) || st.st_size > max_bytes) ::close(fd);
    QKV_CHECK(!S_ISDIR(st.st_mode), shown, ": is a folder, not a ", what);
    QKV_CHECK(S_ISREG(st.st_mode), shown, ": is not a regular file (a ", what, " must be one)");
    QKV_CHECK(st.st_size <= max_bytes, shown, ": holds ", st.st_size, " bytes; a ", what, " may hold at most ",
              max_bytes);
    if (size == 0) check_really_empty(what);
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() { ::close(fd); }
  size_t read_at(int64_t offset, char* out, size_t n) const { return detail::read_at(fd, offset, out, n); }

 private:
  // A file of 0 bytes by its size may still give bytes, or an error (/proc/self/mem): not an empty file.
  void check_really_empty(const char* what) {
    char byte;
    ssize_t got;
    do got = ::pread(fd, &byte, 1, 0);
    while (got < 0 && errno == EINTR);
    if (got == 0) return;
    const int error = errno;
    ::close(fd);
    QKV_CHECK(got > 0, shown, ": cannot read: ", std::strerror(error));
    throw Error(cat(shown, ": its size reads 0 bytes but it gives more (a /proc or /sys file?): a ", what,
                    " must be a plain file"));
  }
};
}  // namespace regular_file
using regular_file::RegularFile;

std::string read_regular_file(const std::string& path, int64_t max_bytes, const char* what) {
  RegularFile file(path, max_bytes, what);
  std::string bytes(static_cast<size_t>(file.size), '\0');
  bytes.resize(file.read_at(0, bytes.data(), bytes.size()));  // a file that shrank while read: judged by what was read
  return bytes;
}

struct FileReader::Impl {
  RegularFile file;
  Impl(const std::string& path, const char* what) : file(path, INT64_MAX, what) {}  // its size: the user's own file
};

FileReader::FileReader(const std::string& path, const char* what) : impl_(std::make_unique<Impl>(path, what)) {}
FileReader::~FileReader() = default;
int64_t FileReader::size() const { return impl_->file.size; }

void FileReader::read(int64_t offset, char* out, size_t n) const {
  QKV_CHECK(offset >= 0 && static_cast<uint64_t>(offset) + n <= static_cast<uint64_t>(impl_->file.size),
            impl_->file.shown, ": a read of ", n, " bytes at ", offset, " past its end (", impl_->file.size, " bytes)");
  QKV_CHECK(impl_->file.read_at(offset, out, n) == n, impl_->file.shown, ": shrank while being read");
}

namespace {
// The files mapped now, for the SIGBUS handler: a mapped file cut short kills the reader at its next touch of a
// lost page. The handler reads this table only (async-signal-safe), names the file and exits.
struct MappedRange {
  std::atomic<const char*> begin{nullptr};
  const char* end = nullptr;
  char shown[256] = {};
};
MappedRange mapped_ranges[32];

void on_sigbus(int, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  for (const MappedRange& r : mapped_ranges) {
    const char* begin = r.begin.load();
    if (!begin || at < begin || at >= r.end) continue;
    const char* words[] = {"qkv: error: ", r.shown,
                           ": the file was cut short while qkv read it (a checkpoint in use "
                           "must not be changed)\n"};
    for (const char* w : words)
      if (::write(2, w, std::strlen(w)) < 0) break;
    ::_exit(1);
  }
  ::signal(SIGBUS, SIG_DFL);  // not a mapped file's: the default, a crash with a core
  ::raise(SIGBUS);
}

MappedRange* note_mapping(const char* begin, size_t bytes, const std::string& shown) {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    return ::sigaction(SIGBUS, &action, nullptr) == 0;
  }();
  if (!installed) return nullptr;
  static std::mutex noting;
  std::lock_guard<std::mutex> lock(noting);
  for (MappedRange& r : mapped_ranges) {
    if (r.begin.load()) continue;
    r.end = begin + bytes;
    std::snprintf(r.shown, sizeof r.shown, "%s", shown.c_str());
    r.begin.store(begin);
    return &r;
  }
  return nullptr;  // 32 files mapped at once: the caller reads instead
}
}  // namespace

std::shared_ptr<char> FileReader::map() const {
  const RegularFile& file = impl_->file;
  if (file.size == 0) return nullptr;
  const size_t bytes = static_cast<size_t>(file.size);
  // Populated read-only, then made writable: populating a writable private mapping copies every page (the
  // kernel breaks copy-on-write up front); this way the page cache's pages are mapped as they are, and only a
  // page written later (a model trained on from the file) is copied.
  void* at = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd, 0);
  if (at == MAP_FAILED) return nullptr;
  if (::mprotect(at, bytes, PROT_READ | PROT_WRITE) != 0) {
    ::munmap(at, bytes);
    return nullptr;
  }
  MappedRange* range = note_mapping(static_cast<const char*>(at), bytes, file.shown);
  if (!range) {
    ::munmap(at, bytes);
    return nullptr;
  }
  return std::shared_ptr<char>(static_cast<char*>(at), [bytes, range](char* p) {
    ::munmap(p, bytes);
    range->begin.store(nullptr);
  });
}

Tensor TensorFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return Tensor();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, Existing existing) {
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
    header += quoted(name, path) + ":{\"dtype\":\"" + safetensors_dtype(t.dtype()) + "\",\"shape\":[" + dims +
              "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint64_t length = header.size();

  check_writable_target(path, /*probe=*/false);  // the temporary below is the probe
  // A temporary of this process's own, created new (never an existing file
  // or a symlink planted there), then renamed over the target.
  std::string tmp = temporary_beside(path);  // new, this process's own (a leftover of a crash removed)
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", tmp, ": ", std::strerror(errno));
  try {
    detail::write_all(fd, std::string_view(reinterpret_cast<const char*>(&length), 8), tmp);  // little-endian
    detail::write_all(fd, header, tmp);
    for (const auto& [name, t] : tensors) {  // a device's tensor is copied to the host, one at a time
      Tensor host = t.detach().to(Device::cpu());
      detail::write_all(
          fd, std::string_view(static_cast<const char*>(host.raw_data()), host.numel() * element_size(host.dtype())),
          tmp);
    }
    QKV_CHECK(::fsync(fd) == 0, "cannot flush ", tmp, ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (detail::before_rename) detail::before_rename(tmp);
  commit_file(tmp, path, existing);  // renamed into place, the rename made durable; on failure the temporary goes
}

namespace {

// Errors about the file being read, each starting with its name.
struct FileError {
  std::string shown;  // the path, printable
  Error operator()(const std::string& what) const { return Error(cat(shown, ": ", what)); }
};

// Where a tensor's bytes lie in the data section.
struct Span {
  uint64_t begin, end;
  size_t index;  // into TensorFile::tensors
};

// The JSON header, checked against the file's size before it is read;
// `length` is its length in bytes (the data starts at 8 + length).
nlohmann::json read_header(const RegularFile& input, const FileError& fail, uint64_t& length) {
  const uint64_t file_size = static_cast<uint64_t>(input.size);
  if (file_size < 8)
    throw fail(
        cat("truncated: ", file_size, " bytes, a safetensors file has at least 8 (not a safetensors checkpoint)"));
  if (input.read_at(0, reinterpret_cast<char*>(&length), 8) != 8) throw fail("cannot read its first 8 bytes");
  // Text (a CSV log, a JSON file) read as a length is a huge number: say what the file is not.
  if (length > file_size - 8)
    throw fail(cat("header length ", length, " runs past the end of the file (", file_size,
                   " bytes): not a safetensors checkpoint"));
  if (length > kMaxHeader) throw fail(cat("header length ", length, " is larger than ", kMaxHeader));
  std::string header_text(length, '\0');
  if (input.read_at(8, header_text.data(), length) != length) throw fail("shrank while being read");
  nlohmann::json header;
  try {
    header = detail::parse_strict_json(header_text);
  } catch (const Error& e) {
    throw fail(cat("bad header: ", e.what()));
  }
  if (!header.is_object()) throw fail("bad header: not a JSON object");
  return header;
}

bool json_size(const nlohmann::json& v, uint64_t& out) {  // a JSON integer >= 0
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

void read_metadata(const nlohmann::json& entry, const FileError& fail, std::map<std::string, std::string>& metadata) {
  if (!entry.is_object()) throw fail("__metadata__ is not an object");
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string()) throw fail(cat("__metadata__ value of '", printable(k), "' is not a string"));
    metadata[k] = v.get<std::string>();
  }
}

// A tensor's header entry, checked: a known dtype, a shape of sane sizes,
// and data_offsets inside the data that hold exactly its bytes.
Span check_tensor_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_size,
                        const FileError& fail) {
  const std::string shown = printable(name);
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
    throw fail(cat("tensor '", shown, "' lacks dtype, shape or data_offsets"));
  const nlohmann::json &dtype = entry["dtype"], &shape = entry["shape"], &offsets = entry["data_offsets"];
  DType dt;
  uint64_t element_bytes;
  if (!dtype.is_string() || !stored_dtype(dtype.get<std::string>(), dt, element_bytes))
    throw fail(cat("tensor '", shown, "' has unsupported dtype ",
                   dtype.is_string() ? printable(dtype.get<std::string>()) : "?",
                   " (qkv reads F32, F64, I64, BOOL, F16, BF16)"));
  if (!shape.is_array() || shape.size() > 8)
    throw fail(cat("tensor '", shown, "' has a shape that is not a list of at most 8 sizes"));
  Shape dims;
  uint64_t count = 1;
  for (const nlohmann::json& d : shape) {
    uint64_t size;
    if (!json_size(d, size) || size > (uint64_t{1} << 40))
      throw fail(cat("tensor '", shown, "' has a bad size in its shape"));
    dims.push_back(static_cast<int64_t>(size));
    if (__builtin_mul_overflow(count, size, &count) || count > (uint64_t{1} << 40))
      throw fail(cat("tensor '", shown, "' is too large"));
  }
  uint64_t begin, end;
  if (!offsets.is_array() || offsets.size() != 2 || !json_size(offsets[0], begin) || !json_size(offsets[1], end) ||
      end < begin)
    throw fail(cat("tensor '", shown, "' has bad data_offsets"));
  if (end > data_size)
    throw fail(
        cat("tensor '", shown, "' data_offsets [", begin, ", ", end, ") run past the data (", data_size, " bytes)"));
  if (end - begin != count * element_bytes)
    throw fail(cat("tensor '", shown, "' holds ", end - begin, " bytes but ", dtype.get<std::string>(), " ",
                   shape_str(dims), " needs ", count * element_bytes));
  return {begin, end, 0};
}

// Sorts the spans by where they begin; fails unless they tile the data
// exactly, without a gap or an overlap.
void check_spans_tile(std::vector<Span>& spans, const NamedTensors& tensors, uint64_t data_size,
                      const FileError& fail) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t covered = 0;
  for (const Span& s : spans) {
    const std::string shown = printable(tensors[s.index].first);
    if (s.begin < covered) throw fail(cat("tensor '", shown, "' overlaps the one before it"));
    if (s.begin > covered) throw fail(cat("bytes [", covered, ", ", s.begin, ") of the data belong to no tensor"));
    covered = s.end;
  }
  if (covered != data_size) throw fail(cat("bytes [", covered, ", ", data_size, ") of the data belong to no tensor"));
}

// One tensor's data, read into a tensor of its (checked) header entry.
Tensor read_tensor(const RegularFile& input, int64_t data_at, const Span& s, const std::string& name,
                   const nlohmann::json& entry, const FileError& fail) {
  Shape dims;
  for (const auto& d : entry["shape"]) dims.push_back(d.get<int64_t>());
  DType dt;
  uint64_t element_bytes;
  const std::string stored = entry["dtype"].get<std::string>();
  stored_dtype(stored, dt, element_bytes);
  Tensor t = Tensor::empty(dims, dt);
  if (element_bytes == 2) {  // a 16-bit float, widened into the float32 tensor
    std::vector<uint16_t> halves(t.numel());
    if (input.read_at(data_at + static_cast<int64_t>(s.begin), reinterpret_cast<char*>(halves.data()),
                      s.end - s.begin) != s.end - s.begin)
      throw fail("shrank while being read");
    float* out = t.data<float>();
    for (size_t i = 0; i < halves.size(); ++i)
      out[i] = stored == "F16" ? half_to_float(halves[i]) : bfloat16_to_float(halves[i]);
    return t;
  }
  char* bytes = static_cast<char*>(t.raw_data());
  if (input.read_at(data_at + static_cast<int64_t>(s.begin), bytes, s.end - s.begin) != s.end - s.begin)
    throw fail("shrank while being read");
  if (dt == DType::Bool)  // only 0 and 1 are valid bools
    for (uint64_t i = 0; i < s.end - s.begin; ++i)
      if (static_cast<unsigned char>(bytes[i]) > 1)
        throw fail(cat("tensor '", printable(name), "' has a bool that is not 0 or 1"));
  return t;
}

}  // namespace

namespace {

// A file whose header has been read and validated in full: every entry's
// dtype, shape and span, the spans tiling the data.
struct CheckedFile {
  const FileError fail;
  const RegularFile input;
  nlohmann::json header;
  int64_t data_at = 0;
  TensorFile listing;       // names (in the header's order), no tensors yet; the metadata
  std::vector<Span> spans;  // sorted by where they begin

  explicit CheckedFile(const std::string& path)
      : fail{printable(path)}, input(path, INT64_MAX, "checkpoint file") {  // its size on disk: the user's own file
    // The header first, then the tensors it describes: a 5 GB file that is no checkpoint is refused by its
    // first bytes, and nothing is read or allocated on the header's say-so before all of it is validated.
    uint64_t length;
    header = read_header(input, fail, length);
    const uint64_t data_size = static_cast<uint64_t>(input.size) - 8 - length;
    data_at = static_cast<int64_t>(8 + length);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        read_metadata(entry, fail, listing.metadata);
        continue;
      }
      Span span = check_tensor_entry(name, entry, data_size, fail);
      span.index = listing.tensors.size();
      spans.push_back(span);
      listing.tensors.emplace_back(name, Tensor());
    }
    check_spans_tile(spans, listing.tensors, data_size, fail);
  }
};

}  // namespace

std::vector<TensorEntry> read_safetensors_header(const std::string& path,
                                                 std::map<std::string, std::string>* metadata) {
  CheckedFile file(path);
  if (metadata) *metadata = file.listing.metadata;
  std::vector<TensorEntry> entries;
  for (const Span& s : file.spans) {
    const std::string& name = file.listing.tensors[s.index].first;
    const nlohmann::json& entry = file.header[name];
    TensorEntry e{name, entry["dtype"].get<std::string>(), {}};
    for (const auto& d : entry["shape"]) e.shape.push_back(d.get<int64_t>());
    entries.push_back(std::move(e));
  }
  return entries;
}

void for_each_safetensor(const std::string& path,
                         const std::function<void(const TensorEntry& entry, std::string_view bytes)>& each) {
  CheckedFile file(path);
  uint64_t largest = 0;
  for (const Span& s : file.spans) largest = std::max(largest, s.end - s.begin);
  // One buffer, reused: the spans tile the file, so it is at most the file's size. Not zeroed (pread fills
  // it), on 2 MiB pages where the kernel has them: a GPT-2's 154 MB wte took 38,000 page faults on 4 KiB ones.
  constexpr size_t kHugePage = size_t{2} << 20;
  void* memory = nullptr;
  if (posix_memalign(&memory, kHugePage, std::max<uint64_t>(largest, 1)) != 0)
    throw file.fail(cat("no memory to read a tensor of ", largest, " bytes"));
  std::unique_ptr<char, decltype(&std::free)> buffer(static_cast<char*>(memory), &std::free);
  ::madvise(memory, std::max<uint64_t>(largest, 1), MADV_HUGEPAGE);  // advice only
  for (const Span& s : file.spans) {
    const std::string& name = file.listing.tensors[s.index].first;
    const nlohmann::json& entry = file.header[name];
    TensorEntry e{name, entry["dtype"].get<std::string>(), {}};
    for (const auto& d : entry["shape"]) e.shape.push_back(d.get<int64_t>());
    const uint64_t n = s.end - s.begin;
    if (file.input.read_at(file.data_at + static_cast<int64_t>(s.begin), buffer.get(), n) != n)
      throw file.fail("shrank while being read");
    each(e, std::string_view(buffer.get(), n));
  }
}

TensorFile load_safetensors(const std::string& path, const std::vector<std::string>& skip_prefixes) {
  CheckedFile file(path);
  // The spans tile the data without overlap: the tensors take at most twice the file's size (16-bit floats widen).
  TensorFile loaded;
  loaded.metadata = file.listing.metadata;
  for (const Span& s : file.spans) {
    const std::string& name = file.listing.tensors[s.index].first;
    if (std::any_of(skip_prefixes.begin(), skip_prefixes.end(),
                    [&](const std::string& p) { return name.compare(0, p.size(), p) == 0; }))
      continue;
    loaded.tensors.emplace_back(name, read_tensor(file.input, file.data_at, s, name, file.header[name], file.fail));
  }
  return loaded;  // in the order of their data, as written
}

}  // namespace qkv::io

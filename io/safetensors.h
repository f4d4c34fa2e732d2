// safetensors files (the serialization floor: io/ sits below nn/ and optim/): the format Hugging Face's safetensors
// library reads (8-byte little-endian header length, a JSON header, raw little-endian data), written atomically and
// validated in full when read. Little-endian hosts only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/tensor.h"
#include "io/output.h"

namespace qkv::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct TensorFile {
  NamedTensors tensors;                         // in the order of their data in the file
  std::map<std::string, std::string> metadata;  // the header's "__metadata__" (strings only)
  /// The tensor named `name`, or an undefined tensor.
  Tensor get(const std::string& name) const;
};

/// Writes tensors (float32, float64, int64, bool; names unique, not
/// "__metadata__") and metadata to `path`: first to "path.tmp.<pid>" (new,
/// this process's own), flushed to disk, then renamed over `path`, so a
/// crash leaves the old file whole and two writers never share a temporary.
/// Refuses to replace anything but a regular file (check_writable_target);
/// on any failure the temporary is removed. `existing` as for commit_file
/// (output.h): Keep leaves a file that appeared meanwhile and keeps this one beside it.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {}, Existing existing = Existing::Replace);

/// The bytes of an untrusted file: a regular file only (a pipe would block,
/// a device never end) of at most `max_bytes`; one-line errors name the file
/// and call it a `what` ("checkpoint", "--data file").
std::string read_regular_file(const std::string& path, int64_t max_bytes, const char* what);

/// An untrusted file read piece by piece (a format of fixed layout, such as
/// llm.c's checkpoints): a regular file only, its size known before any
/// read, each read inside it; one-line errors name the file and call it a `what`.
class FileReader {
 public:
  FileReader(const std::string& path, const char* what);
  ~FileReader();
  int64_t size() const;
  /// n bytes at `offset` into `out`; throws for a range past the end or a file that shrank.
  void read(int64_t offset, char* out, size_t n) const;
  /// The whole file mapped copy-on-write (MAP_PRIVATE, its pages mapped at
  /// once from the page cache: no copy), unmapped when the last handle goes;
  /// null where it cannot be mapped. Writes through it never reach the file.
  /// A file cut short by another process while mapped would kill qkv with
  /// SIGBUS: a handler turns that into a one-line error naming the file.
  std::shared_ptr<char> map() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Throws qkv::Error unless `path` is a new name or a regular file (not a
/// symlink, folder, device or pipe) and, with `probe`, its folder lets this
/// process create the temporary a save needs. Run it before long work.
void check_writable_target(const std::string& path, bool probe = true);

/// Reads and validates a regular file (a pipe or device is refused): its
/// header first, length within the file and at most 4 MiB, strict JSON
/// (nlohmann-json; repeated keys refused), then each tensor's bytes straight
/// into its storage, allocated only after every entry is validated (time and
/// memory linear in the file's size);
/// dtypes (F32, F64, I64, BOOL; F16 and BF16, as Hugging Face's
/// checkpoints hold them, are read into float32 exactly), shapes, offsets (in range, matching the
/// shape, not overlapping, covering the data with no holes). Any problem
/// throws qkv::Error naming the file and the problem. Tensors whose names
/// start with one of `skip_prefixes` are validated in the header like the
/// others but neither read nor kept (a model without its optimizer state:
/// a 124M model's checkpoint is 1.5 GB, its weights 496 MB).
TensorFile load_safetensors(const std::string& path, const std::vector<std::string>& skip_prefixes = {});

/// A tensor as a file's header describes it: its name, its dtype as the
/// file spells it ("F32", "BF16"), its shape.
struct TensorEntry {
  std::string name;
  std::string dtype;
  Shape shape;
};
/// The header of a safetensors file, validated exactly as load_safetensors
/// validates it, with no tensor read: the entries in the order of their data,
/// and the metadata into `metadata` when given. What a loader checks against
/// a model before it reads (or allocates for) any of the data.
std::vector<TensorEntry> read_safetensors_header(const std::string& path,
                                                 std::map<std::string, std::string>* metadata = nullptr);
/// load_safetensors one tensor at a time, as the file holds it: each
/// entry with its bytes (little-endian values of entry.dtype), in the order
/// of their data, read into one buffer reused from tensor to tensor (valid
/// during the call), so a loader that converts as it copies never holds the
/// file beside the model. The header is validated in full before the first
/// call. The file is read, not mapped: a mapped file that another process
/// truncates kills its reader with SIGBUS; reading costs one copy.
void for_each_safetensor(const std::string& path,
                         const std::function<void(const TensorEntry& entry, std::string_view bytes)>& each);

/// IEEE binary16 and bfloat16 values as float32, exactly (every one is a float).
float half_to_float(uint16_t bits);
float bfloat16_to_float(uint16_t bits);

namespace detail {
/// Test hook: called after the temporary file is written and before it is
/// renamed; a test throws from it to play a crash in between.
extern std::function<void(const std::string& temporary_path)> before_rename;
}  // namespace detail

}  // namespace qkv::io

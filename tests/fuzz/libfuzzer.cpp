// libFuzzer's entry points (clang -fsanitize=fuzzer): see fuzz_files.cpp.
//
// A checkpoint's header is JSON holding more JSON in strings (qkv.config,
// qkv.task, ...): byte mutations nearly always break the outer JSON, and a
// 10-minute search of byte mutations alone stopped finding new code within
// minutes. So for checkpoints, half the mutations are made in the header's
// own terms: a metadata field or a field of its JSON set to an edge value
// or removed, a tensor's shape, dtype, offsets or name changed, a tensor
// dropped; the file is then written back as a safetensors file.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_files.h"

namespace {

std::string kind;

// Values on and past the edges that qkv's bounds draw, and words it knows.
const char* const kValues[] = {"0",
                               "1",
                               "2",
                               "3",
                               "-1",
                               "7",
                               "8",
                               "9",
                               "16",
                               "64",
                               "128",
                               "129",
                               "65536",
                               "65537",
                               "1048576",
                               "1048577",
                               "2147483648",
                               "4294967296",
                               "9223372036854775807",
                               "-9223372036854775808",
                               "18446744073709551616",
                               "1e9",
                               "0.5",
                               "1e308",
                               "1e-320",
                               "nan",
                               "inf",
                               "-inf",
                               "",
                               " 1",
                               "1 ",
                               "0x10",
                               "+1",
                               "window:0",
                               "window:1",
                               "window:-1",
                               "window:",
                               "window:9223372036854775807",
                               "linear",
                               "full",
                               "gpt",
                               "seq2seq",
                               "encoder",
                               "vit",
                               "recommender",
                               "cls",
                               "mean",
                               "copy",
                               "reverse",
                               "sort",
                               "add",
                               "text",
                               "brackets",
                               "digits",
                               "sessions",
                               "adamw",
                               "adam",
                               "sgd",
                               "cosine",
                               "constant",
                               "/dev/zero",
                               "../x",
                               "{}",
                               "[]",
                               "{\"a\":\"1\"}"};
constexpr size_t kValueCount = sizeof kValues / sizeof kValues[0];

struct Random {
  unsigned seed;
  unsigned next() {
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
  }
  size_t below(size_t n) { return n ? next() % n : 0; }
};

// One change to a header, in its own terms; false when it found nothing to change.
bool mutate_header(nlohmann::json& header, Random& r) {
  std::vector<std::string> tensors;
  for (auto& [name, entry] : header.items())
    if (name != "__metadata__") tensors.push_back(name);
  if (r.below(2) && header.contains("__metadata__") && header["__metadata__"].is_object() &&
      !header["__metadata__"].empty()) {
    nlohmann::json& meta = header["__metadata__"];
    auto it = meta.begin();
    std::advance(it, r.below(meta.size()));
    if (!it->is_string()) return false;
    nlohmann::json inner = nlohmann::json::parse(it->get<std::string>(), nullptr, false);
    if (inner.is_object() && !inner.empty() && r.below(4)) {  // a field of the JSON inside
      auto field = inner.begin();
      std::advance(field, r.below(inner.size()));
      if (r.below(6) == 0)
        inner.erase(field);
      else
        *field = kValues[r.below(kValueCount)];
      *it = inner.dump();
    } else if (r.below(8) == 0) {
      meta.erase(it);
    } else {
      *it = kValues[r.below(kValueCount)];
    }
    return true;
  }
  if (tensors.empty()) return false;
  nlohmann::json& entry = header[tensors[r.below(tensors.size())]];
  if (!entry.is_object()) return false;
  switch (r.below(6)) {
    case 0:  // a size of the shape
      if (entry["shape"].is_array() && !entry["shape"].empty()) {
        auto& d = entry["shape"][r.below(entry["shape"].size())];
        const int64_t sizes[] = {0, 1, 2, 3, 1 << 20, int64_t{1} << 40};
        d = r.below(2) && d.is_number_integer() ? d.get<int64_t>() + 1 : sizes[r.below(6)];
      }
      break;
    case 1:  // one size more or fewer (the same bytes, another rank)
      if (entry["shape"].is_array()) {
        if (r.below(2) && !entry["shape"].empty())
          entry["shape"].erase(entry["shape"].size() - 1);
        else
          entry["shape"].push_back(1);
      }
      break;
    case 2: {
      const char* dtypes[] = {"F32", "F64", "I64", "BOOL", "F16"};
      entry["dtype"] = dtypes[r.below(5)];
      break;
    }
    case 3:  // the tensor's bytes moved
      if (entry["data_offsets"].is_array() && entry["data_offsets"].size() == 2) {
        auto& o = entry["data_offsets"][r.below(2)];
        if (o.is_number_unsigned()) o = o.get<uint64_t>() + (r.below(2) ? 4 : -4);
      }
      break;
    case 4: {  // renamed: a parameter missing, another unknown
      nlohmann::json copy = entry;
      const std::string old = tensors[r.below(tensors.size())];
      header.erase(old);
      header[old + (r.below(2) ? ".x" : "")] = copy;
      break;
    }
    default: header.erase(tensors[r.below(tensors.size())]);
  }
  return true;
}

// The file with its header changed in its own terms, or "" when it is not a safetensors file.
std::string mutate_checkpoint(const uint8_t* data, size_t size, Random& r) {
  uint64_t length;
  if (size < 8) return "";
  std::memcpy(&length, data, 8);
  if (length > size - 8) return "";
  nlohmann::json header = nlohmann::json::parse(reinterpret_cast<const char*>(data) + 8,
                                                reinterpret_cast<const char*>(data) + 8 + length, nullptr, false);
  if (!header.is_object()) return "";
  const int changes = 1 + static_cast<int>(r.below(3));
  for (int i = 0; i < changes; ++i)
    if (!mutate_header(header, r)) return "";
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t new_length = text.size();
  std::string file(reinterpret_cast<const char*>(&new_length), 8);
  file += text;
  file.append(reinterpret_cast<const char*>(data) + 8 + length, size - 8 - length);
  return file;
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kind = qkv_fuzz_kind();
  // The commands' reports would bury libFuzzer's own; errors are thrown, not printed.
  if (!std::freopen("/dev/null", "w", stdout)) return 1;
  std::atexit(qkv_fuzz_cleanup);  // a finding ends in abort(): its input stays for a look
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Random r{seed};
  if ((kind == "checkpoint" || kind == "resume") && r.below(2)) {
    std::string file = mutate_checkpoint(data, size, r);
    if (!file.empty() && file.size() <= max_size) {
      std::memcpy(data, file.data(), file.size());
      return file.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qkv_fuzz_one(kind, data, size);
  return 0;
}

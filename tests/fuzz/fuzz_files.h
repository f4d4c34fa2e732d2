// What the two builds of the file fuzzer share (fuzz_files.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

/// $QKV_FUZZ, the kind of file fuzzed; exits with a usage line when unset.
const char* qkv_fuzz_kind();
/// Runs the commands that read a file of `kind` on these bytes: "" when they
/// ran, else the qkv::Error that refused the file; aborts on a finding.
std::string qkv_fuzz_one(const std::string& kind, const uint8_t* data, size_t size);
/// Removes the scratch folder.
void qkv_fuzz_cleanup();

// Plugins: a shared library of parts (nn/parts.h) that the qkv program loads
// when it is named on the command line (qkv train --plugin ./libmine.so
// --norm my_norm). Built against the installed library with
// find_package(qkv) and linked to qkv::plugin (headers only: the parts'
// registries are the program's own), it defines its entry point with one line:
//
//   void register_my_parts() { qkv::nn::register_norm_part({"my_norm", ...}); }
//   QKV_PLUGIN("my_norm", "what it adds", register_my_parts)
//
// docs/api.md ("Your own part, as a plugin") and tests/consumer/ show one.
#pragma once

#include <string>
#include <vector>

#include "nn/version.h"

namespace qkv::nn {

/// Raised with every change to what a plugin and the program share (the
/// registries' and parts' layout): a plugin built for another is refused.
inline constexpr int kPluginInterface = 1;

/// What a plugin's entry point (extern "C" qkv_plugin) returns.
struct PluginInfo {
  int interface;             // kPluginInterface when it was built
  const char* qkv_version;   // QKV_VERSION_TEXT when it was built
  const char* name;          // for messages and checkpoints
  const char* summary;       // for qkv info
  void (*register_parts)();  // registers its parts (register_norm_part, ...)
};

/// Loads the plugin at `path` (a file the user named; never searched for):
/// checks it is a shared library with qkv_plugin, built for this interface
/// and version, then registers its parts, each recorded as the plugin's.
/// Loading one file twice does nothing more. One-line errors name the file.
void load_plugin(const std::string& path);

/// The plugins loaded so far, as named: "./librmsnorm.so".
std::vector<std::string> loaded_plugins();

/// The file name of the plugin that registered the part being registered now ("" outside load_plugin).
std::string registering_plugin();

}  // namespace qkv::nn

#ifndef QKV_PLUGIN_BUILT_FOR
#define QKV_PLUGIN_BUILT_FOR QKV_VERSION_TEXT  // a test builds a plugin "for another version" with this
#endif

/// Defines a plugin's entry point: its name, a summary and the function that registers its parts.
#define QKV_PLUGIN(NAME, SUMMARY, REGISTER)                                                                          \
  extern "C" __attribute__((visibility("default"))) const qkv::nn::PluginInfo* qkv_plugin() {                        \
    static const qkv::nn::PluginInfo info{qkv::nn::kPluginInterface, QKV_PLUGIN_BUILT_FOR, NAME, SUMMARY, REGISTER}; \
    return &info;                                                                                                    \
  }

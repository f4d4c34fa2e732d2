#include "nn/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>

#include "autograd/error.h"

namespace qkv::nn {

namespace {

struct Plugins {
  std::vector<std::string> named;  // as the user named them
  std::set<std::string> real;      // their real paths: one file loads once
  std::string registering;         // the file name of the plugin whose parts are being registered
};
Plugins& plugins() {
  static Plugins p;
  return p;
}

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The entry point of the library at `real` (dlopen'ed by its absolute path: never searched for).
const PluginInfo* open_plugin(const std::string& real, const std::string& shown) {
  void* handle = ::dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw Error(
        cat("plugin ", shown, ": not a shared library qkv can load (", one_line(why ? why : "no reason given"), ")"));
  }
  auto entry = reinterpret_cast<const PluginInfo* (*)()>(::dlsym(handle, "qkv_plugin"));
  if (!entry) {
    ::dlclose(handle);
    throw Error(cat("plugin ", shown, ": a shared library without qkv's entry point qkv_plugin (define it with ",
                    "QKV_PLUGIN, nn/plugin.h)"));
  }
  const PluginInfo* info = entry();
  const std::string version = info && info->qkv_version ? printable(info->qkv_version, 40) : "?";
  if (!info || info->interface != kPluginInterface || version != QKV_VERSION_TEXT || !info->register_parts) {
    const int interface = info ? info->interface : 0;
    ::dlclose(handle);
    throw Error(cat("plugin ", shown, " was built for qkv ", version, " (plugin interface ", interface,
                    "); this is qkv ", QKV_VERSION_TEXT, " (interface ", kPluginInterface,
                    "): rebuild it against this qkv"));
  }
  return info;  // the library stays loaded: its parts' code is in it
}

}  // namespace

void load_plugin(const std::string& path) {
  const std::string shown = printable(path);
  QKV_CHECK(!path.empty(), "a plugin needs a file name");
  struct stat st {};
  QKV_CHECK(::stat(path.c_str(), &st) == 0, "plugin ", shown, ": ", std::strerror(errno));
  QKV_CHECK(S_ISREG(st.st_mode), "plugin ", shown, ": not a file");
  char real[PATH_MAX];
  QKV_CHECK(::realpath(path.c_str(), real) != nullptr, "plugin ", shown, ": ", std::strerror(errno));
  Plugins& p = plugins();
  if (p.real.count(real)) return;
  const PluginInfo* info = open_plugin(real, shown);
  p.registering = file_name(path);
  try {
    info->register_parts();
  } catch (const std::exception& e) {
    p.registering.clear();
    throw Error(cat("plugin ", shown, ": ", e.what()));
  }
  p.registering.clear();
  p.real.insert(real);
  p.named.push_back(path);
}

std::vector<std::string> loaded_plugins() { return plugins().named; }

std::string registering_plugin() { return plugins().registering; }

}  // namespace qkv::nn

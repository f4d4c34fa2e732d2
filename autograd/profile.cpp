#include "autograd/profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string_view>

namespace qkv::profile {

namespace {
std::mutex totals_mutex;
std::map<std::string, Region> totals;

// "void qkv::{anonymous}::backward(const T*, ...) [with T = float]" -> "backward":
// the last name before the parameter list, without its namespaces or template arguments.
std::string short_function(std::string_view f) {
  size_t end = 0;
  for (int angle = 0; end < f.size(); ++end) {
    if (f[end] == '<') ++angle;
    if (f[end] == '>') --angle;
    if (f[end] == '(' && angle == 0) break;
  }
  std::string name;
  int angle = 0;
  for (char c : f.substr(0, end)) {
    if (c == '<') ++angle;
    if (c == '>') --angle;
    if (c == '<' || c == '>' || angle > 0) continue;
    if (c == ' ' || c == ':')
      name.clear();  // a return type or a scope ends before the name
    else
      name += c;
  }
  return name.empty() ? std::string(f.substr(0, end)) : name;
}

std::string name_of(const detail::Site& s) {
  char text[160];
  if (s.kind == detail::Site::Product) {
    std::snprintf(text, sizeof text, "%cgemm %lldx%lldx%lld %c%c %s", s.type, static_cast<long long>(s.n),
                  static_cast<long long>(s.m), static_cast<long long>(s.k), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.path);
    return text;
  }
  std::string_view file = s.where.file_name();
  file = file.substr(file.find_last_of('/') + 1);  // npos + 1 == 0: the whole name
  std::snprintf(text, sizeof text, "loop %s (%.*s:%u)", short_function(s.where.function_name()).c_str(),
                static_cast<int>(file.size()), file.data(), s.where.line());
  return text;
}
}  // namespace

void detail::record(const Site& site, double seconds) {
  std::string name = name_of(site);
  std::lock_guard lock(totals_mutex);
  Region& r = totals[name];
  r.name = std::move(name);
  r.seconds += seconds;
  ++r.calls;
  r.forked += site.forked;
  r.items += site.items;
}

void start() {
  {
    std::lock_guard lock(totals_mutex);
    totals.clear();
  }
  detail::active.store(true, std::memory_order_relaxed);
}

std::vector<Region> stop() {
  detail::active.store(false, std::memory_order_relaxed);
  std::lock_guard lock(totals_mutex);
  std::vector<Region> regions;
  for (auto& [name, r] : totals) regions.push_back(r);
  totals.clear();
  std::stable_sort(regions.begin(), regions.end(),
                   [](const Region& a, const Region& b) { return a.seconds > b.seconds; });
  return regions;
}

}  // namespace qkv::profile

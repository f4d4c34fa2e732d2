// The library's floors, read from its own #include lines: a folder may
// include its own files and those of the floors below it, never above, and
// no chain of includes may come back to where it started.
//   autograd  <  io, distributed  <  nn  <  optim  <  train  <  study  <  cli (the qkv program), examples
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::map<std::string, int> kFloor{{"autograd", 0}, {"io", 1},    {"distributed", 1}, {"nn", 2},      {"optim", 3},
                                        {"train", 4},    {"study", 5}, {"cli", 6},         {"examples", 6}};

// Every source, header and CUDA file under the floors' folders: path (from the root) -> the project files it includes.
std::map<std::string, std::vector<std::string>> includes() {
  std::map<std::string, std::vector<std::string>> out;
  const std::regex line_re("^\\s*#\\s*include\\s+\"([^\"]+)\"");
  for (const auto& [folder, floor] : kFloor) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(QKV_SOURCE_DIR) / folder)) {
      std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu")) continue;
      std::string file = fs::relative(entry.path(), QKV_SOURCE_DIR).generic_string();
      std::ifstream in(entry.path());
      std::string line;
      std::smatch m;
      auto& list = out[file];
      while (std::getline(in, line))
        if (std::regex_search(line, m, line_re)) {
          std::string target = m[1];
          // "commands.h" inside cli/ means cli/commands.h
          if (!fs::exists(fs::path(QKV_SOURCE_DIR) / target))
            target = (fs::path(file).parent_path() / target).generic_string();
          list.push_back(target);
        }
    }
  }
  return out;
}

std::string folder_of(const std::string& path) { return path.substr(0, path.find('/')); }

}  // namespace

TEST_CASE("layering: no include reaches up a floor, or across to a peer floor") {
  auto graph = includes();
  REQUIRE(graph.size() > 100);
  int edges = 0;
  for (const auto& [file, targets] : graph)
    for (const std::string& target : targets) {
      std::string from = folder_of(file), to = folder_of(target);
      if (!kFloor.count(to)) continue;  // tests/, third-party
      ++edges;
      INFO(file << " includes " << target);
      CHECK((from == to || kFloor.at(to) < kFloor.at(from)));
    }
  CHECK(edges > 200);  // the scan found the includes (269 when written)
}

TEST_CASE("layering: no include cycle") {
  auto graph = includes();
  std::map<std::string, int> state;  // 0 new, 1 on the current path, 2 done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& file) {
    state[file] = 1;
    path.push_back(file);
    if (graph.count(file))
      for (const std::string& next : graph.at(file)) {
        if (!graph.count(next)) continue;
        if (state[next] == 1) {
          std::string cycle;
          for (auto it = std::find(path.begin(), path.end(), next); it != path.end(); ++it) cycle += *it + " -> ";
          FAIL("include cycle: " << cycle << next);
        }
        if (state[next] == 0) visit(next);
      }
    path.pop_back();
    state[file] = 2;
  };
  for (const auto& [file, targets] : graph)
    if (state[file] == 0) visit(file);
}

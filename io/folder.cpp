#include "io/folder.h"

#include <sys/stat.h>

#include <filesystem>

#include "autograd/error.h"

namespace qkv::io {

namespace {

namespace fs = std::filesystem;

// Whether `target` lies inside `root` (both canonical).
bool inside(const fs::path& target, const fs::path& root) {
  const fs::path rel = target.lexically_relative(root);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

}  // namespace

std::string file_in_folder(const std::string& folder, const std::string& name, const char* folder_is) {
  const fs::path path = fs::path(folder) / name;
  std::error_code ec, ec2;
  const fs::path root = fs::weakly_canonical(folder, ec), target = fs::weakly_canonical(path, ec2);
  QKV_CHECK(!ec && !ec2, printable(path.string()), ": cannot resolve it (", (ec ? ec : ec2).message(), ")");
  if (inside(target, root)) return path.string();
  // A hub snapshot: models--x/snapshots/<revision>/name -> ../../blobs/<hash>.
  const fs::path snapshots = root.parent_path(), model = snapshots.parent_path();
  const bool hub_snapshot = snapshots.filename() == "snapshots" && model.filename().string().rfind("models--", 0) == 0;
  QKV_CHECK(hub_snapshot && inside(target, model / "blobs"), printable(path.string()),
            ": a link out of the folder (qkv reads a ", folder_is, "'s own files",
            hub_snapshot ? ", and a hub snapshot's blobs" : "", ")");
  return path.string();
}

void check_folder(const std::string& path, const char* expected) {
  struct stat st {};
  QKV_CHECK(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), printable(path), ": not a folder (", expected, ")");
}

}  // namespace qkv::io

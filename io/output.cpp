#include "io/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autograd/error.h"
#include "io/file_io.h"
#include "io/metadata.h"

namespace qkv::io {

namespace {

std::string shown(const std::string& path) { return printable(path); }

// How to replace what is there, in the caller's words: the library knows no flags.
std::string replace_advice(const char* force_flag) {
  return force_flag ? cat(", or replace it with ", force_flag) : std::string();
}

// "a symbolic link", "a folder", ... for anything that is not a regular file; nullptr for one.
const char* not_a_file(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (!S_ISREG(st.st_mode)) return "a device or socket";
  return nullptr;
}

void sync_folder_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool ends_with_any(const std::string& name, const std::vector<std::string>& suffixes) {
  for (const std::string& s : suffixes)
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  return false;
}

// The first entry of `folder` that is not one of the command's own files (a
// regular file named with one of `suffixes`), described for an error
// ("notes.txt", "index.html, a FIFO"); "" when every entry is ours. Sets `ec`
// when the folder cannot be read.
std::string first_foreign_entry(const std::string& folder, const std::vector<std::string>& suffixes,
                                std::error_code& ec) {
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    struct stat est;
    if (::lstat(entry.path().c_str(), &est) != 0) return cat(shown(name), ", ", std::strerror(errno));
    const char* kind = not_a_file(est);
    if (kind || !ends_with_any(name, suffixes)) return kind ? cat(shown(name), ", ", kind) : shown(name);
  }
  return "";
}

std::vector<std::string> folders_made;  // by make_parent_folders, outermost first

// The temporaries this process made, for remove_temporaries_now() in a signal handler: fixed storage (no
// allocation there), a slot read only once its kind says it is whole. A committed temporary's name no longer
// exists, so removing it again does nothing; a slot is reused once its name is gone.
constexpr std::sig_atomic_t kFreeSlot = 0, kTemporaryFile = 1, kTemporaryFolder = 2;
struct TemporarySlot {
  volatile std::sig_atomic_t kind = kFreeSlot;
  char path[PATH_MAX] = {};
};
TemporarySlot temporaries[64];
volatile pid_t writing_child = 0;

void remember_temporary(const std::string& path, std::sig_atomic_t kind) {
  if (path.size() >= PATH_MAX) return;
  for (int pass = 0; pass < 2; ++pass)
    for (TemporarySlot& slot : temporaries) {
      struct stat st;
      if (pass == 1 && slot.kind != kFreeSlot && ::lstat(slot.path, &st) != 0) slot.kind = kFreeSlot;  // gone
      if (slot.kind != kFreeSlot) continue;
      std::memcpy(slot.path, path.c_str(), path.size() + 1);
      slot.kind = kind;
      return;
    }
}

// A flat folder's entries, then the folder: system calls only (getdents64, unlinkat), for a signal handler.
void remove_flat_folder_now(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buffer[4096];
    for (ssize_t n; (n = ::getdents64(fd, buffer, sizeof buffer)) > 0;)
      for (ssize_t at = 0; at < n;) {
        const auto* entry = reinterpret_cast<const struct dirent64*>(buffer + at);
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
          ::unlinkat(fd, entry->d_name, 0);
        at += entry->d_reclen;
      }
    ::close(fd);
  }
  ::rmdir(path);
}

// SIGINT, SIGTERM and SIGHUP held back for the object's life: a handler that removes temporaries runs
// once a step that must not be cut in two (an output folder's swap) is whole.
struct SignalsHeld {
  sigset_t before;
  SignalsHeld() {
    sigset_t held;
    sigemptyset(&held);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
    ::pthread_sigmask(SIG_BLOCK, &held, &before);
  }
  ~SignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &before, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;
};

// Whether `name` is base + "." + kind + "." + the pid of a process that no longer runs.
bool dead_process_name(const std::string& name, const std::string& base, const char* kind) {
  const std::string prefix = cat(base, ".", kind, ".");
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  int64_t pid = 0;
  if (!parse_integer(std::string_view(name).substr(prefix.size()), pid) || pid <= 0 || pid > INT32_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Whether `path` is a folder of regular files only (what OutputFolder builds), owned by this user.
bool flat_folder_of_ours(const std::filesystem::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) return false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec))
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) return false;
  return !ec;
}

// What processes killed with SIGKILL left beside `path`: their temporaries (path.tmp.N) go; an output
// folder's swap cut short (path.old.N) is rolled back where the result is missing, else removed.
void remove_dead_leftovers(const std::string& path) {
  const std::filesystem::path target(path), folder = target.parent_path().empty() ? "." : target.parent_path();
  const std::string base = target.filename().string();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (dead_process_name(name, base, "tmp")) {
      if (S_ISREG(st.st_mode)) ::unlink(entry.path().c_str());
      if (flat_folder_of_ours(entry.path())) remove_flat_folder_now(entry.path().c_str());
    } else if (dead_process_name(name, base, "old") && flat_folder_of_ours(entry.path())) {
      if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT)
        std::rename(entry.path().c_str(), path.c_str());  // the previous result, put back
      else
        remove_flat_folder_now(entry.path().c_str());
    }
  }
}

}  // namespace

void make_parent_folders(const std::string& path, const char* flag) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  // One component at a time, remembering only what mkdir itself created: a path through '..' (new/../kept)
  // or a folder another process makes meanwhile is never taken for ours, so never removed.
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : parent) {
    prefix /= part;
    if (::mkdir(prefix.c_str(), 0755) == 0) {
      folders_made.push_back(prefix.string());
      continue;
    }
    struct stat st;
    QKV_CHECK(errno == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
              "cannot create the folder of ", flag, " ", shown(path), ": ",
              errno == EEXIST ? cat(shown(prefix.string()), " is not a folder") : std::string(std::strerror(errno)));
  }
}

void remove_folders_made() {
  for (auto it = folders_made.rbegin(); it != folders_made.rend(); ++it) ::rmdir(it->c_str());  // fails unless empty
  folders_made.clear();
}

void check_output_file(const std::string& path, const char* flag, bool force, const std::vector<std::string>& inputs,
                       const char* force_flag) {
  QKV_CHECK(!path.empty(), flag, " needs a file name");
  const std::string name = std::filesystem::path(path).filename().string();
  QKV_CHECK(!name.empty() && name != "." && name != "..", flag, " ", shown(path), " names a folder, not a file");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    const char* kind = not_a_file(st);
    QKV_CHECK(!kind, "refusing to write ", flag, " ", shown(path), ": it is ", kind);
    for (const std::string& input : inputs) {
      struct stat in;
      QKV_CHECK(!(::stat(input.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino),
                "refusing to write ", flag, " ", shown(path), ": it is this command's input");
    }
    QKV_CHECK(force, shown(path), " already exists: choose another ", flag, replace_advice(force_flag));
  } else {
    QKV_CHECK(errno == ENOENT, "cannot write ", flag, " ", shown(path), ": ", std::strerror(errno));
  }
  make_parent_folders(path, flag);
  // Create (and remove) the temporary a save will need: the folder must let us.
  std::string tmp = temporary_beside(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", flag, " ", shown(path), ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
}

GrowingFile::GrowingFile(const std::string& path, Mode mode, int64_t max_existing, std::string* existing) {
  if (mode == Mode::create) {  // O_EXCL: atomic, and never through a link (a dangling one included)
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    QKV_CHECK(fd_ >= 0, errno == EEXIST ? cat("refusing to replace ", shown(path), ": it already exists")
                                        : cat("cannot write ", shown(path), ": ", std::strerror(errno)));
    sync_folder_of(path);
    return;
  }
  if (mode == Mode::replace) {
    std::string tmp = temporary_beside(path);
    fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    QKV_CHECK(fd_ >= 0, "cannot write ", shown(path), ": ", std::strerror(errno));
    try {
      commit_file(tmp, path);
    } catch (...) {
      ::close(fd_);
      throw;
    }
    return;
  }
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  QKV_CHECK(fd_ >= 0, "cannot write ", shown(path), ": ",
            errno == ELOOP ? "it is a symbolic link" : std::strerror(errno));
  struct stat st;
  std::string problem = ::fstat(fd_, &st) != 0      ? cat("cannot read ", shown(path), ": ", std::strerror(errno))
                        : not_a_file(st)            ? cat("refusing to write ", shown(path), ": it is ", not_a_file(st))
                        : st.st_size > max_existing ? cat("refusing to append to ", shown(path), ": it holds ",
                                                          st.st_size, " bytes, more than ", max_existing)
                        // Appending through a hard link would grow a file of other names too.
                        : st.st_nlink > 1 ? cat("refusing to append to ", shown(path), ": it has ", st.st_nlink - 1,
                                                " other name", st.st_nlink == 2 ? "" : "s", " (hard links)")
                                          : "";
  if (!problem.empty()) {
    ::close(fd_);
    throw Error(problem);
  }
  if (!existing) return;
  existing->assign(static_cast<size_t>(st.st_size), '\0');
  existing->resize(detail::read_at(fd_, 0, existing->data(), existing->size()));
}

GrowingFile::~GrowingFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool GrowingFile::finish() {
  int error = ::fsync(fd_) == 0 ? 0 : errno;
  if (::close(fd_) != 0 && error == 0) error = errno;
  fd_ = -1;
  errno = error;
  return error == 0;
}

bool GrowingFile::write(std::string_view text) { return detail::write_whole(fd_, text); }

std::string name_beside(const std::string& path, const std::string& suffix) {
  const size_t slash = path.rfind('/'), name = path.size() - (slash == std::string::npos ? 0 : slash + 1);
  if (name + suffix.size() <= NAME_MAX) return path + suffix;
  // A legal name near the 255-byte limit had no room for the suffix ("File name too long" after the work): its
  // end is cut and told apart from other cut names by a hash of the whole.
  char tag[24];
  std::snprintf(tag, sizeof tag, "~%016llx", static_cast<unsigned long long>(fnv1a(path)));
  return path.substr(0, path.size() - (name + suffix.size() + std::strlen(tag) - NAME_MAX)) + tag + suffix;
}

std::string temporary_beside(const std::string& path) {
  remove_dead_leftovers(path);
  std::string tmp = name_beside(path, cat(".tmp.", ::getpid()));
  ::unlink(tmp.c_str());  // a crashed process of this pid left it (a symlink goes, not its target)
  remember_temporary(tmp, kTemporaryFile);
  return tmp;
}

void set_writing_child(pid_t pid) noexcept { writing_child = pid; }

void remove_temporaries_now() noexcept {
  if (const pid_t child = writing_child; child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  for (TemporarySlot& slot : temporaries)
    if (slot.kind == kTemporaryFile) ::unlink(slot.path);
  for (TemporarySlot& slot : temporaries)
    if (slot.kind == kTemporaryFolder) remove_flat_folder_now(slot.path);
}

namespace {
// Renames `from` to `to` only where nothing is at `to` (false, errno EEXIST, otherwise): renameat2's
// RENAME_NOREPLACE, or, on a file system without it, a hard link (refused on an existing name) and unlink.
bool rename_noreplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  if (::link(from.c_str(), to.c_str()) != 0) return false;
  ::unlink(from.c_str());
  return true;
}

// Moves a result whose target appeared meanwhile to the first free path.unsaved, path.unsaved-2, ...,
// and throws the error that says where it is.
[[noreturn]] void keep_beside(const std::string& result, const std::string& path) {
  for (int i = 1; i <= 100; ++i) {
    const std::string kept = name_beside(path, i == 1 ? std::string(".unsaved") : cat(".unsaved-", i));
    if (rename_noreplace(result, kept))
      throw Error(
          cat(shown(path), " appeared while this command worked and was not replaced: its result is in ", shown(kept)));
    if (errno != EEXIST && errno != ENOTEMPTY) break;
  }
  std::error_code ec;
  std::filesystem::remove_all(result, ec);
  throw Error(cat(shown(path),
                  " appeared while this command worked and was not replaced; no free name "
                  "beside it kept the result"));
}
}  // namespace

void commit_file(const std::string& temporary, const std::string& path, Existing existing) {
  const bool done = existing == Existing::Replace ? std::rename(temporary.c_str(), path.c_str()) == 0
                                                  : rename_noreplace(temporary, path);
  if (!done) {
    int error = errno;
    if (existing == Existing::Keep && error == EEXIST) keep_beside(temporary, path);
    ::unlink(temporary.c_str());
    throw Error(cat("cannot write ", shown(path), ": ", std::strerror(error)));
  }
  sync_folder_of(path);
}

void write_file(const std::string& path, std::string_view bytes, Existing existing) {
  std::string tmp = temporary_beside(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", shown(path), ": ", std::strerror(errno));
  try {
    detail::write_all(fd, bytes, path);
    QKV_CHECK(::fsync(fd) == 0, "cannot write ", shown(path), ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {  // the descriptor is released either way: never closed twice
    int error = errno;
    ::unlink(tmp.c_str());
    throw Error(cat("cannot write ", shown(path), ": ", std::strerror(error)));
  }
  commit_file(tmp, path, existing);
}

OutputFolder::OutputFolder(std::string path, const char* flag, bool force, std::vector<std::string> suffixes,
                           const char* force_flag)
    : path_(std::move(path)), flag_(flag), suffixes_(std::move(suffixes)) {
  QKV_CHECK(!path_.empty(), flag_, " needs a folder name");
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  // "maps/." is maps, but a rename onto it fails ("Device or resource busy"): the folder's own name is needed.
  const std::string last = path_.substr(path_.rfind('/') == std::string::npos ? 0 : path_.rfind('/') + 1);
  QKV_CHECK(last != "." && last != "..", flag_, " ", shown(path_), " ends in '", last,
            "': give the folder by its own name");
  remove_dead_leftovers(path_);  // first: a swap a SIGKILL cut short puts the previous result back
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0) {
    QKV_CHECK(S_ISDIR(st.st_mode), "refusing to write ", flag_, " ", shown(path_), ": it is ",
              S_ISLNK(st.st_mode) ? "a symbolic link" : "not a folder");
    std::error_code ec;
    std::string foreign = first_foreign_entry(path_, suffixes_, ec);
    QKV_CHECK(!ec, "cannot read ", flag_, " ", shown(path_), ": ", ec.message());
    QKV_CHECK(foreign.empty(), "refusing to write ", flag_, " ", shown(path_), ": it holds ", foreign,
              ", which this command does not write");
    const bool empty = std::filesystem::is_empty(path_, ec);
    QKV_CHECK(empty || force, shown(path_), " already holds a result: choose another ", flag_,
              replace_advice(force_flag));
    existed_ = true;
  } else {
    QKV_CHECK(errno == ENOENT, "cannot write ", flag_, " ", shown(path_), ": ", std::strerror(errno));
  }
  make_parent_folders(path_, flag_.c_str());
  temporary_ = name_beside(path_, cat(".tmp.", ::getpid()));
  std::error_code ec;
  std::filesystem::remove_all(temporary_, ec);       // a crashed process of this pid left it
  remember_temporary(temporary_, kTemporaryFolder);  // before it exists: an interrupt from here on removes it
  QKV_CHECK(::mkdir(temporary_.c_str(), 0755) == 0, "cannot write ", flag_, " ", shown(path_), ": ",
            std::strerror(errno));
}

OutputFolder::~OutputFolder() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove_all(temporary_, ec);
}

std::string OutputFolder::path_for(const std::string& name) const {
  QKV_CHECK(!committed_, "OutputFolder: write after commit");
  QKV_CHECK(name.find('/') == std::string::npos && name != "." && name != ".." && ends_with_any(name, suffixes_),
            "OutputFolder: bad file name '", printable(name), "'");
  return temporary_ + "/" + name;
}

void OutputFolder::write(const std::string& name, std::string_view bytes) {
  const std::string file = path_for(name);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  QKV_CHECK(fd >= 0, "cannot write ", shown(path_ + "/" + name), ": ", std::strerror(errno));
  try {
    detail::write_all(fd, bytes, path_ + "/" + name);
    QKV_CHECK(::fsync(fd) == 0, "cannot write ", shown(path_ + "/" + name), ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  QKV_CHECK(::close(fd) == 0, "cannot write ", shown(path_ + "/" + name), ": ", std::strerror(errno));
}

void OutputFolder::commit() {
  QKV_CHECK(!committed_, "OutputFolder: committed twice");
  if (!existed_) {      // nothing to swap out: in place only while there is still nothing there
    committed_ = true;  // from here the temporary is either the result or kept beside it
    if (!rename_noreplace(temporary_, path_)) {
      const int error = errno;
      if (error == EEXIST || error == ENOTEMPTY) keep_beside(temporary_, path_);
      committed_ = false;
      throw Error(cat("cannot write ", flag_, " ", shown(path_), ": ", std::strerror(error)));
    }
    sync_folder_of(path_);
    return;
  }
  // The old result (checked in the constructor) moves aside, the new one in,
  // then the old one goes: at every moment one whole result is in place or
  // beside it. Ctrl-C and kill wait until the swap is done (a SIGKILL
  // between the two renames is undone by the next run: remove_dead_leftovers).
  const SignalsHeld held;
  std::string old = name_beside(path_, cat(".old.", ::getpid()));
  std::error_code ec;
  std::filesystem::remove_all(old, ec);
  bool moved = std::rename(path_.c_str(), old.c_str()) == 0;
  QKV_CHECK(moved || errno == ENOENT, "cannot replace ", flag_, " ", shown(path_), ": ", std::strerror(errno));
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    int error = errno;
    if (moved) std::rename(old.c_str(), path_.c_str());
    throw Error(cat("cannot write ", flag_, " ", shown(path_), ": ", std::strerror(error)));
  }
  committed_ = true;
  sync_folder_of(path_);
  if (!moved) return;
  // The old result goes, unless something else appeared in it meanwhile: then it stays beside, whole.
  if (first_foreign_entry(old, suffixes_, ec).empty() && !ec)
    std::filesystem::remove_all(old, ec);  // regular files of ours only: nothing outside is touched
}

}  // namespace qkv::io

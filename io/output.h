// The one rule for every file qkv writes (checkpoints, logs, pages,
// pictures, folders of them):
//   - it is written to a new temporary beside its target, flushed to disk,
//     then renamed into place, so a crash or a full disk leaves the previous
//     file whole;
//   - an existing target needs `force`, and is never one of the command's
//     own inputs;
//   - symbolic links, folders, devices and FIFOs are refused before any work
//     (inside output folders too);
//   - an output folder holds exactly one result: it is built beside its
//     target and swapped in whole, so no stale file of an earlier result stays;
//   - a write error names its cause (errno).
// This floor knows files only; it sits below nn/ and optim/.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

/// Throws qkv::Error (one line naming `flag` and the path) unless `path` may
/// receive a new file: a new name, or with `force` an existing regular file
/// that is none of `inputs`. Missing parent folders are created. Run it
/// before the command's work, so nothing is computed that cannot be saved.
/// `force_flag` is the caller's way to set `force` ("--force"): the error for
/// an existing file advises it (none given: it names no way).
void check_output_file(const std::string& path, const char* flag, bool force,
                       const std::vector<std::string>& inputs = {}, const char* force_flag = nullptr);

/// Creates the missing folders above `path` (errors name `flag`), and
/// remembers them for remove_folders_made().
void make_parent_folders(const std::string& path, const char* flag);
/// Removes the folders make_parent_folders() created in this process that are
/// still empty, deepest first: a command that fails after its checks (a
/// missing --data, a refused --log) leaves no empty folders behind.
void remove_folders_made();

/// What a commit does with a file that is at its target by then: Replace it
/// (the caller's force, or a file the command wrote there itself), or Keep
/// it. Kept: a target that appeared after the command's checks (another
/// run's save on the same name, a user's file) is never replaced; the new
/// file stays beside it, under a name the error gives, and nothing is lost.
enum class Existing { Replace, Keep };

/// Writes `bytes` to `path` under the rule above (it does not check force:
/// check_output_file did). The error names the file and errno's reason.
void write_file(const std::string& path, std::string_view bytes, Existing existing = Existing::Replace);

/// `path` with `suffix` appended; where the file name would pass the 255
/// bytes a name may hold, its end is cut and a hash of the path added.
std::string name_beside(const std::string& path, const std::string& suffix);
/// A name for a temporary beside `path` ("path.tmp.<pid>"), free of any
/// leftover of a crashed process with this pid, for a program (Graphviz)
/// that writes the file itself; then commit_file() renames it into place.
/// Leftovers of processes that no longer run (killed by SIGKILL: path.tmp.N
/// of a dead N, owned by this user) are removed first, so none is ever taken
/// for a result. The name is remembered for remove_temporaries_now().
std::string temporary_beside(const std::string& path);

/// Removes every temporary this process has open (files, and the folders
/// OutputFolder builds) with system calls alone: async-signal-safe, for a
/// SIGINT or SIGTERM handler. Committed results and previous results are
/// untouched (a temporary's name is this process's own).
void remove_temporaries_now() noexcept;
/// A child process writing one of those temporaries (Graphviz's dot): remove_temporaries_now() ends it
/// first, so it cannot make its file again once the temporaries are gone. 0 forgets it.
void set_writing_child(pid_t pid) noexcept;
/// Renames `temporary` to `path` and makes the rename durable; on failure
/// the temporary is removed and the error names the cause. With Keep, an
/// existing `path` stays (renameat2's RENAME_NOREPLACE, or link and unlink
/// where the file system lacks it) and the temporary becomes path.unsaved
/// (or .unsaved-2, ...): the error says so.
void commit_file(const std::string& temporary, const std::string& path, Existing existing = Existing::Replace);

/// A file written as it grows (a training log), under the rule as far as a
/// growing file allows. `create` makes `path` only if nothing is there
/// (O_EXCL), so a file made since the caller's checks, such as another run's
/// log started on the same name, is refused, and a link is never followed.
/// `replace` creates a temporary beside `path` and renames it over whatever
/// is there before the first byte (hard links and a planted link are
/// replaced, never written through). An appended one is opened without
/// following a link, must be a regular file of one name (no hard links) and
/// at most `max_existing` bytes, and those bytes are read into `existing`.
class GrowingFile {
 public:
  enum class Mode { create, replace, append };
  GrowingFile(const std::string& path, Mode mode, int64_t max_existing, std::string* existing);
  GrowingFile(const GrowingFile&) = delete;
  GrowingFile& operator=(const GrowingFile&) = delete;
  ~GrowingFile();
  /// Appends `text` whole; false when that failed (errno says why; 0 for a short write).
  bool write(std::string_view text);
  /// Flushes it to disk and closes it; false when that failed (errno says why).
  bool finish();

 private:
  int fd_ = -1;
};

/// An output folder written as one result. The constructor checks the
/// target before any work: a new name, an empty folder, or (with `force`) a
/// folder holding only regular files whose names end in one of `suffixes`
/// (an earlier result of the same command; anything else is refused, so
/// --force never deletes a file qkv did not write). write() puts files into
/// a temporary folder beside it; commit() swaps that in and removes the old
/// result. Destroyed uncommitted, it removes its temporary folder.
/// `force_flag` as for check_output_file.
class OutputFolder {
 public:
  OutputFolder(std::string path, const char* flag, bool force, std::vector<std::string> suffixes,
               const char* force_flag = nullptr);
  /// commit() swaps in the result: over the folder the constructor checked
  /// (force), or, where there was none, only while there still is none; a
  /// folder that appeared meanwhile stays, and the result is kept beside it
  /// (path.unsaved, ...), as commit_file keeps a file.
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  ~OutputFolder();
  /// Writes one file; `name` is a plain file name with one of the suffixes.
  void write(const std::string& name, std::string_view bytes);
  /// Where file `name` (checked as write() checks it) goes in the temporary
  /// folder, for a writer that makes the file itself (save_safetensors).
  std::string path_for(const std::string& name) const;
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, flag_, temporary_;
  std::vector<std::string> suffixes_;
  bool committed_ = false;
  bool existed_ = false;  // a folder was at the path when the constructor checked it
};

}  // namespace qkv::io

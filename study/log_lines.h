// A training log read line by line from disk, in bounded memory: a chunk
// and one line at a time, never the whole file. A line longer than the limit
// is refused as soon as it passes it, not after it is read. The file is an
// untrusted input: a regular file only (a FIFO would block, /dev/zero never
// end), of at most a given size; errors name it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qkv::study {

class LogLines {
 public:
  /// Opens `path` (errors name it, `what` says what it should be: "log file").
  /// Lines end at LF (a CR before it dropped), or, in a file whose first
  /// line-limit of bytes holds a CR and no LF, at CR (an old Mac's export).
  /// A UTF-8 byte-order mark first is skipped.
  LogLines(const std::string& path, int64_t max_bytes, size_t max_line, const char* what);
  LogLines(const LogLines&) = delete;
  LogLines& operator=(const LogLines&) = delete;
  ~LogLines();
  /// The next line (valid until the next call), numbered from 1 in `number`;
  /// false at the end. Reads no further than the size the file had when it
  /// was opened, so a log still growing is read as it was then.
  bool next(std::string_view& line, int64_t& number);
  /// Starts again from the first line.
  void rewind();
  int64_t size() const { return size_; }

 private:
  bool fill();
  std::string shown_;
  int fd_ = -1;
  int64_t size_ = 0, read_ = 0, number_ = 0;
  size_t max_line_, start_ = 0;
  std::string buffer_;
  char end_ = '\n';
  bool first_ = true;
};

}  // namespace qkv::study

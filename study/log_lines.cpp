#include "study/log_lines.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "autograd/error.h"

namespace qkv::study {

namespace {
constexpr size_t kChunk = size_t{1} << 20;
}

LogLines::LogLines(const std::string& path, int64_t max_bytes, size_t max_line, const char* what)
    : shown_(printable(path)), max_line_(max_line) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  QKV_CHECK(fd_ >= 0, shown_, ": cannot open: ", std::strerror(errno));
  struct stat st;
  const bool stated = ::fstat(fd_, &st) == 0;
  const int error = errno;
  if (!stated || !S_ISREG(st.st_mode) || st.st_size > max_bytes) ::close(fd_), fd_ = -1;
  QKV_CHECK(stated, shown_, ": cannot read: ", std::strerror(error));
  QKV_CHECK(!S_ISDIR(st.st_mode), shown_, ": is a folder, not a ", what);
  QKV_CHECK(S_ISREG(st.st_mode), shown_, ": is not a regular file (a ", what, " must be one)");
  QKV_CHECK(st.st_size <= max_bytes, shown_, ": holds ", st.st_size, " bytes; a ", what, " may hold at most ",
            max_bytes);
  size_ = st.st_size;
  // Where the first line-limit of bytes holds a CR and no LF, CR ends the lines (a spreadsheet's export).
  std::string head(static_cast<size_t>(std::min<int64_t>(size_, static_cast<int64_t>(max_line_) + 1)), '\0');
  const ssize_t got = ::pread(fd_, head.data(), head.size(), 0);
  QKV_CHECK(got >= 0, shown_, ": cannot read: ", std::strerror(errno));
  head.resize(static_cast<size_t>(got));
  if (head.find('\n') == std::string::npos && head.find('\r') != std::string::npos) end_ = '\r';
  rewind();
}

LogLines::~LogLines() {
  if (fd_ >= 0) ::close(fd_);
}

void LogLines::rewind() {
  read_ = 0, number_ = 0, start_ = 0, first_ = true;
  buffer_.clear();
}

bool LogLines::fill() {
  buffer_.erase(0, start_);
  start_ = 0;
  const size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kChunk), size_ - read_));
  if (want == 0) return false;
  const size_t had = buffer_.size();
  buffer_.resize(had + want);
  ssize_t got;
  do got = ::pread(fd_, buffer_.data() + had, want, read_);
  while (got < 0 && errno == EINTR);
  QKV_CHECK(got >= 0, shown_, ": cannot read: ", std::strerror(errno));
  buffer_.resize(had + static_cast<size_t>(got));
  read_ += got;
  if (got == 0) size_ = read_;  // it shrank while read: what was read is the file
  if (first_ && buffer_.size() >= 3) {
    if (buffer_.compare(0, 3, "\xef\xbb\xbf") == 0) start_ = 3;  // a UTF-8 byte-order mark, as spreadsheets write
    first_ = false;
  }
  return got > 0;
}

bool LogLines::next(std::string_view& line, int64_t& number) {
  for (;;) {
    const size_t end = buffer_.find(end_, start_);
    const bool whole = end != std::string::npos;
    if (!whole && buffer_.size() - start_ <= max_line_ && fill()) continue;
    if (!whole && start_ == buffer_.size()) return false;
    const size_t stop = whole ? end : buffer_.size();
    line = std::string_view(buffer_).substr(start_, stop - start_);
    number = ++number_;
    // Refused as soon as it passes the limit: the rest of it is never read.
    QKV_CHECK(line.size() <= max_line_, shown_, " line ", number, ": more than ", max_line_,
              " bytes; a qkv log row holds at most ", max_line_, ": not a qkv log");
    start_ = whole ? end + 1 : stop;
    if (end_ == '\n' && !line.empty() && line.back() == '\r') line.remove_suffix(1);  // it passed through Windows
    return true;
  }
}

}  // namespace qkv::study

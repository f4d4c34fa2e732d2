// Internal to io/ (no public header includes it): whole reads and writes on a
// file descriptor, retried when a signal interrupts them. The one copy that
// checkpoints, written files and the training log all use.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "autograd/error.h"

namespace qkv::io::detail {

/// Reads up to n bytes at `offset` into out; returns how many there were
/// (fewer: the file ended, or shrank while being read).
inline size_t read_at(int fd, int64_t offset, char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + static_cast<int64_t>(got)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

/// Writes all of `bytes`; false when a write failed (errno says why, 0 when
/// nothing was written without an error).
inline bool write_whole(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

/// write_whole, or a one-line error naming `path` and the cause.
inline void write_all(int fd, std::string_view bytes, const std::string& path) {
  if (!write_whole(fd, bytes))
    throw Error(cat("cannot write ", printable(path), ": ", std::strerror(errno != 0 ? errno : EIO)));
}

}  // namespace qkv::io::detail

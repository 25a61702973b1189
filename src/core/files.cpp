#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "core/error.h"

namespace plumb {

namespace {

std::string errno_text() {
  return std::generic_category().message(errno);
}

}  // namespace

int open_regular_file(const std::string& path) {
  // O_NONBLOCK makes open() of a FIFO return at once; fstat then tells what the descriptor is.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  PLUMB_CHECK(fd >= 0, "cannot open {}: {}", path, errno_text());
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    const std::string why = stat_ok ? "it is not a regular file" : "cannot stat it: " + errno_text();
    ::close(fd);
    PLUMB_FAIL("{}: {}", path, why);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path) {
  const int fd = open_regular_file(path);
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      PLUMB_FAIL("failed reading {}: {}", path, why);
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

std::optional<std::string> read_regular_file_if_exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return read_regular_file(path);
}

}  // namespace plumb

// Socket-file housekeeping for the admin socket. See admin_socket_file.hpp.
#include "net/admin_socket_file.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace troupe::net {
namespace {

std::runtime_error failure(const std::filesystem::path& path, std::string_view what, int error) {
  return std::runtime_error(
      fmt::format("admin socket {}: {}: {}", path.string(), what, std::strerror(error)));
}

// Creates `dir` with mode 0700 if missing (parents with default modes); an existing one must be
// a real directory. When `must_be_private`, it must also be ours and closed to others.
void ensure_directory(const std::filesystem::path& dir, bool must_be_private) {
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0) {
    if (errno != ENOENT) throw failure(dir, "cannot inspect the directory", errno);
    std::error_code ec;
    if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      throw failure(dir, "cannot create the directory", errno);
    }
    if (::lstat(dir.c_str(), &info) != 0) throw failure(dir, "cannot inspect the directory", errno);
  }
  if (!S_ISDIR(info.st_mode)) {
    throw std::runtime_error(fmt::format("admin socket directory {} is not a directory (or is a "
                                         "symlink)", dir.string()));
  }
  if (must_be_private && (info.st_uid != ::getuid() || (info.st_mode & 077) != 0)) {
    throw std::runtime_error(fmt::format(
        "admin socket directory {} must be owned by uid {} with mode 0700", dir.string(), ::getuid()));
  }
}

}  // namespace

std::filesystem::path default_admin_socket_path() {
  if (const char* explicit_path = std::getenv("TROUPE_ADMIN_SOCKET"); explicit_path && *explicit_path) {
    return explicit_path;
  }
  if (const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR"); runtime_dir && *runtime_dir) {
    return std::filesystem::path(runtime_dir) / "troupe.sock";
  }
  return std::filesystem::path(fmt::format("/tmp/troupe-{}", ::getuid())) / "troupe.sock";
}

int connect_unix_socket(const std::filesystem::path& path) {
  const std::string& text = path.native();
  if (text.size() > kMaxUnixSocketPathBytes) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, text.data(), text.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

SocketFileState probe_socket_file(const std::filesystem::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return SocketFileState::kAbsent;
    throw failure(path, "cannot inspect", errno);
  }
  if (!S_ISSOCK(info.st_mode)) return SocketFileState::kNotSocket;
  const int fd = connect_unix_socket(path);
  if (fd >= 0) {
    ::close(fd);
    return SocketFileState::kLive;
  }
  if (errno == ECONNREFUSED) return SocketFileState::kStale;
  // EAGAIN: a live server whose backlog is full. Anything else (EACCES, ...) is not ours to
  // remove either.
  if (errno == EAGAIN) return SocketFileState::kLive;
  throw failure(path, "cannot probe the existing socket", errno);
}

void claim_socket_path(const std::filesystem::path& path) {
  if (path.native().size() > kMaxUnixSocketPathBytes) {
    throw std::runtime_error(fmt::format("admin socket path {} is longer than {} bytes",
                                         path.string(), kMaxUnixSocketPathBytes));
  }
  if (path.filename().empty()) {
    throw std::runtime_error(fmt::format("admin socket path {} names no file", path.string()));
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  // Our own default directory under /tmp is shared ground: insist that it is ours and private.
  const bool is_default_tmp_dir =
      dir == std::filesystem::path(fmt::format("/tmp/troupe-{}", ::getuid()));
  ensure_directory(dir, is_default_tmp_dir);
  switch (probe_socket_file(path)) {
    case SocketFileState::kAbsent:
      return;
    case SocketFileState::kStale:
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        throw failure(path, "cannot remove the stale socket", errno);
      }
      return;
    case SocketFileState::kLive:
      throw std::runtime_error(fmt::format("another troupe is serving on {}", path.string()));
    case SocketFileState::kNotSocket:
      throw std::runtime_error(
          fmt::format("admin socket path {} exists and is not a socket; not replacing it",
                      path.string()));
  }
}

}  // namespace troupe::net

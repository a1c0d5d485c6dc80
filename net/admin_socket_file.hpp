// Where the admin socket lives and how its file is claimed: the default path, a private
// directory for it, and telling a stale socket (left by a crashed run) from a live one.
// Plain POSIX, no Asio, so `troupe admin` can use it too.
//
// Thread-safety: free functions; they touch the file system and the environment only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace troupe::net {

// $TROUPE_ADMIN_SOCKET if set, else $XDG_RUNTIME_DIR/troupe.sock, else /tmp/troupe-$UID/troupe.sock.
// Creates nothing.
std::filesystem::path default_admin_socket_path();

// What is at a socket path now.
enum class SocketFileState : uint8_t {
  kAbsent,    // nothing there
  kStale,     // a socket file nobody listens on (connect: ECONNREFUSED)
  kLive,      // a server accepts connections there
  kNotSocket, // some other kind of file: never replaced
};
SocketFileState probe_socket_file(const std::filesystem::path& path);

// Makes `path`'s directory ready for a private socket: creates it (mode 0700) when missing; a
// directory of ours under /tmp must be owned by us and not be a symlink. Then refuses a live
// socket or a non-socket file at `path`, and removes a stale one. Throws std::runtime_error with
// a message naming the path ("another troupe is serving on PATH").
void claim_socket_path(const std::filesystem::path& path);

// Connects a blocking Unix stream socket to `path`; returns the fd, or -1 with errno set.
int connect_unix_socket(const std::filesystem::path& path);

// sockaddr_un holds 107 bytes of path.
inline constexpr size_t kMaxUnixSocketPathBytes = 107;

}  // namespace troupe::net

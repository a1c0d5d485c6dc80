// Plain POSIX loopback sockets for the net tests, which drive the servers without compiling
// Beast: the address, a connect, and a receive timeout so a test waiting for bytes that never
// come fails instead of hanging.
//
// Thread-safety: free functions on the caller's fds.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>

namespace troupe::net::testing {

// 127.0.0.1:`port` (0 when binding: any free port).
inline sockaddr_in loopback_address(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Connects `fd` to 127.0.0.1:`port`; false when nothing accepted it.
inline bool connect_loopback(int fd, uint16_t port) {
  const sockaddr_in address = loopback_address(port);
  return ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
}

inline void set_receive_timeout(int fd, int seconds) {
  timeval timeout{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
}

}  // namespace troupe::net::testing

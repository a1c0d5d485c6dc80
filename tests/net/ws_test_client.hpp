// A minimal WebSocket client over a plain POSIX socket (RFC 6455: handshake, masked client
// frames, unmasked server frames), so the server tests do not compile Beast and can behave badly
// on purpose (never answer a close, for instance).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tests/net/loopback.hpp"

namespace troupe::net::testing {

class WsTestClient {
 public:
  enum Opcode : uint8_t { kText = 1, kBinary = 2, kClose = 8, kPing = 9, kPong = 10 };
  struct Frame {
    uint8_t opcode = 0;
    std::string payload;
    // For a close frame: the status code (0 when the frame carried none) and the reason.
    uint16_t close_code() const {
      if (payload.size() < 2) return 0;
      return static_cast<uint16_t>(static_cast<uint8_t>(payload[0]) << 8 |
                                   static_cast<uint8_t>(payload[1]));
    }
    std::string close_reason() const { return payload.size() > 2 ? payload.substr(2) : ""; }
  };

  explicit WsTestClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    connected_ = connect_loopback(fd_, port);
    set_receive_timeout(fd_, 10);  // no test waits this long for one frame
  }
  ~WsTestClient() { ::close(fd_); }
  WsTestClient(const WsTestClient&) = delete;
  WsTestClient& operator=(const WsTestClient&) = delete;

  bool connected() const { return connected_; }

  // Sends the upgrade request and returns the response head (status line and headers); for a
  // refusal the body is left unread.
  // `extra_headers`: whole header lines, each ending in CRLF.
  std::string handshake(std::string_view path = "/v1/chat/ws", std::string_view extra_headers = {}) {
    std::string request = "GET ";
    request.append(path);
    request +=
        " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    request.append(extra_headers);
    request += "\r\n";
    send_raw(request);
    size_t end = std::string::npos;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!receive_more()) return buffer_;
    }
    std::string head = buffer_.substr(0, end + 4);
    buffer_.erase(0, end + 4);
    return head;
  }

  void send_text(std::string_view text) { send_frame(kText, text); }
  // Answers (or starts) the closing handshake.
  void send_close(uint16_t code) {
    const char payload[2] = {static_cast<char>(code >> 8), static_cast<char>(code & 0xff)};
    send_frame(kClose, std::string_view(payload, 2));
  }

  // The next frame; nullopt when the connection ended (or nothing came for 10 s).
  std::optional<Frame> read_frame() {
    if (!fill(2)) return std::nullopt;
    Frame frame;
    frame.opcode = static_cast<uint8_t>(buffer_[0]) & 0x0f;
    const bool masked = (static_cast<uint8_t>(buffer_[1]) & 0x80) != 0;
    uint64_t length = static_cast<uint8_t>(buffer_[1]) & 0x7f;
    size_t header = 2;
    if (length == 126 || length == 127) {
      const size_t num_length_bytes = length == 126 ? 2 : 8;
      if (!fill(header + num_length_bytes)) return std::nullopt;
      length = 0;
      for (size_t i = 0; i < num_length_bytes; ++i) {
        length = length << 8 | static_cast<uint8_t>(buffer_[header + i]);
      }
      header += num_length_bytes;
    }
    char mask[4] = {0, 0, 0, 0};
    if (masked) {
      if (!fill(header + 4)) return std::nullopt;
      for (size_t i = 0; i < 4; ++i) mask[i] = buffer_[header + i];
      header += 4;
    }
    if (!fill(header + length)) return std::nullopt;
    frame.payload = buffer_.substr(header, length);
    for (size_t i = 0; i < frame.payload.size(); ++i) frame.payload[i] ^= mask[i % 4];
    buffer_.erase(0, header + length);
    return frame;
  }

  // The next text or close frame (pings and pongs are skipped).
  std::optional<Frame> read_message() {
    for (;;) {
      std::optional<Frame> frame = read_frame();
      if (!frame || (frame->opcode != kPing && frame->opcode != kPong)) return frame;
    }
  }

  // True when the server closed the TCP connection (EOF or reset) with no more bytes.
  bool closed_by_peer() {
    if (!buffer_.empty()) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    if (n == 0) ::shutdown(fd_, SHUT_WR);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  // Everything the server sends until it closes the connection (or the receive timeout).
  std::string read_all() {
    while (receive_more()) {
    }
    return std::exchange(buffer_, {});
  }

  void send_raw(std::string_view bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }

 private:
  void send_frame(uint8_t opcode, std::string_view payload) {
    std::string frame;
    frame.push_back(static_cast<char>(0x80 | opcode));
    if (payload.size() < 126) {
      frame.push_back(static_cast<char>(0x80 | payload.size()));
    } else {
      frame.push_back(static_cast<char>(0x80 | 126));
      frame.push_back(static_cast<char>(payload.size() >> 8));
      frame.push_back(static_cast<char>(payload.size() & 0xff));
    }
    const char mask[4] = {0x12, 0x34, 0x56, 0x78};
    frame.append(mask, 4);
    for (size_t i = 0; i < payload.size(); ++i) frame.push_back(payload[i] ^ mask[i % 4]);
    send_raw(frame);
  }

  bool receive_more() {
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n == 0) ::shutdown(fd_, SHUT_WR);  // the server closed TCP: so do we, as clients do
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  bool fill(size_t size) {
    while (buffer_.size() < size) {
      if (!receive_more()) return false;
    }
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

}  // namespace troupe::net::testing

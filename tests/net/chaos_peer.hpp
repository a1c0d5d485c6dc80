// A client connection for the session chaos test (session_chaos_test.cpp): a loopback TCP socket,
// optionally carrying TLS (OpenSSL, no verification: the test's own self-signed certificate),
// that sends bytes in random pieces with pauses and reads what comes back. Also the test's
// certificate and the first bytes of a real ClientHello (for handshakes cut short).
//
// Thread-safety: one Peer per thread; the free functions are reentrant.
#pragma once

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "tests/net/loopback.hpp"

namespace troupe::net::testing {

class Peer {
 public:
  // Connects (and shakes hands when `tls` is set); connected() says whether it worked.
  Peer(uint16_t port, SSL_CTX* tls) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    set_receive_timeout(fd_, 5);
    timeval send_timeout{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    connected_ = connect_loopback(fd_, port);
    if (connected_ && tls != nullptr) {
      ssl_ = SSL_new(tls);
      SSL_set_fd(ssl_, fd_);
      connected_ = SSL_connect(ssl_) == 1;
    }
  }
  ~Peer() { close(/*reset=*/false); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  // All of `bytes`, in up to `max_pieces` random pieces with pauses of up to `max_pause_us`
  // between them. False when the server closed or reset first.
  bool send(std::string_view bytes, std::mt19937& rng, int max_pieces = 4, int max_pause_us = 2000) {
    std::uniform_int_distribution<int> pieces_of(1, max_pieces);
    std::uniform_int_distribution<int> pause_of(0, max_pause_us);
    const int pieces = pieces_of(rng);
    size_t at = 0;
    for (int p = 0; p < pieces && at < bytes.size(); ++p) {
      const size_t left = bytes.size() - at;
      const size_t n = p + 1 == pieces ? left : std::uniform_int_distribution<size_t>(1, left)(rng);
      if (!write(bytes.substr(at, n))) return false;
      at += n;
      if (at < bytes.size()) std::this_thread::sleep_for(std::chrono::microseconds(pause_of(rng)));
    }
    return at == bytes.size() || write(bytes.substr(at));
  }

  // Reads until `done(buffer)`, the end of the stream, or no byte for `idle_ms`.
  template <class Done>
  std::string read_until(Done done, int idle_ms = 5000) {
    std::string buffer;
    char chunk[4096];
    while (!done(buffer)) {
      if (!ssl_ || SSL_pending(ssl_) == 0) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, idle_ms) <= 0) break;
      }
      const long n = ssl_ ? SSL_read(ssl_, chunk, sizeof(chunk))
                          : ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      buffer.append(chunk, static_cast<size_t>(n));
    }
    return buffer;
  }
  // True when the stream ended (EOF or reset) during the last read.
  bool saw_end() const { return eof_; }

  // Reads and drops everything until the server closes; false when it is still open after
  // `idle_ms` without a byte.
  bool closed_by_server(int idle_ms = 5000) {
    (void)read_until([](const std::string&) { return false; }, idle_ms);
    return eof_;
  }

  void shutdown_writes() { ::shutdown(fd_, SHUT_WR); }

  // `reset`: an abortive close (RST), as a crashed client's; else a FIN (TLS: without
  // close_notify, as most clients that just go away).
  void close(bool reset) {
    if (fd_ < 0) return;
    if (reset) {
      linger hard{1, 0};
      ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    }
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    ::close(fd_);
    fd_ = -1;
  }

 private:
  bool write(std::string_view bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const long n = ssl_ ? SSL_write(ssl_, bytes.data() + sent, static_cast<int>(bytes.size() - sent))
                          : ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  bool connected_ = false;
  bool eof_ = false;
};

// A self-signed EC certificate for 127.0.0.1 and its key, as PEM files.
inline void write_self_signed_certificate(const std::filesystem::path& cert,
                                          const std::filesystem::path& key) {
  EVP_PKEY* pkey = EVP_EC_gen("prime256v1");
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, pkey);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, pkey, EVP_sha256());
  FILE* f = std::fopen(cert.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(key.c_str(), "w");
  PEM_write_PrivateKey(f, pkey, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(pkey);
}

// The ClientHello a real TLS client would send first (through memory BIOs, never a socket).
inline std::string client_hello(SSL_CTX* ctx) {
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  (void)SSL_connect(ssl);  // wants to read the ServerHello: the hello is in `out`
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  return hello;
}

}  // namespace troupe::net::testing

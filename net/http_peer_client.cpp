// HttpPeerClient: each call is one coroutine on the client's io_context (resolve, connect,
// write, read, close) returning an Answer; the co_spawn completion handler turns it into the
// caller's reply and runs the callback, so every callback runs exactly once (a coroutine that
// threw still completes its handler, with the exception). Expected failures (refused, timeout,
// cancelled) come back as values through as_tuple, never as exceptions.
//
// A call's connection sits in an Exchange, registered by id so that cancel() and the destructor
// can close it. The registry and the Exchanges are touched only on the client's thread.
#include "net/http_peer_client.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <unordered_map>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/disagg_codec.hpp"
#include "net/json_writer.hpp"
#include "model/enum_names.hpp"

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);

namespace {

using CallId = disagg::PeerClient::CallId;

// Why a call stopped early, when it did.
enum class Abort : uint8_t { kNone, kCancelled, kShuttingDown };

constexpr EnumNames<Abort, 3> kAbortNames{{{
    {Abort::kNone, ""}, {Abort::kCancelled, "cancelled"},
    {Abort::kShuttingDown, "shutting down"}}}, ""};
static_assert(kAbortNames.dense());

std::string_view describe(Abort abort) { return kAbortNames.name(abort); }

// One call's connection. Shared by its coroutine and (weakly) the registry.
struct Exchange {
  explicit Exchange(asio::io_context& io) : resolver(io), stream(io) {}

  // NOTE: the coroutine checks `abort` after every step: a close that lands between two
  // steps (the socket not open yet, or a completion already queued) fails no operation.
  void close(Abort why) {
    if (abort == Abort::kNone) abort = why;
    resolver.cancel();
    stream.close();
  }

  tcp::resolver resolver;
  beast::tcp_stream stream;
  Abort abort = Abort::kNone;
};

// What one HTTP exchange asks for.
struct Target {
  disagg::PeerAddress peer;
  http::verb method = http::verb::get;
  std::string path;
  std::string body;  // JSON; sent with POST only
  std::chrono::milliseconds timeout{0};
};

// What came back: an HTTP status and body, or (error not empty) why there is none.
struct Answer {
  int status = 0;
  std::string body;
  std::string error;
};

Answer failure(std::string error) {
  return Answer{.status = 0, .body = {}, .error = std::move(error)};
}

// "[::1]" → "::1": the address parsers and resolvers take a bare IPv6 literal.
std::string_view bare_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

std::string host_header(const disagg::PeerAddress& peer) {
  const std::string_view host = bare_host(peer.host);
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, peer.port);
  return fmt::format("{}:{}", host, peer.port);
}

// An answer body for an error message: one line, at most 200 bytes.
std::string short_body(std::string_view body) {
  constexpr size_t kMax = 200;
  std::string out(body.substr(0, kMax));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  if (body.size() > kMax) out += "...";
  return out;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return fmt::format("internal error: {}", e.what());
  } catch (...) {
    return "internal error";
  }
}

// Runs a caller's callback; one that throws is a bug, logged rather than let out of the
// client's thread (it would end the process).
template <class Reply>
void deliver(const std::function<void(Reply)>& done, Reply reply) {
  try {
    done(std::move(reply));
  } catch (const std::exception& e) {
    spdlog::error("peer client: a callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("peer client: a callback threw");
  }
}

disagg::PrefillReply to_prefill_reply(Answer answer) {
  disagg::PrefillReply reply;
  reply.http_status = answer.status;
  if (!answer.error.empty()) {
    reply.error = std::move(answer.error);
  } else if (answer.status != 200) {
    reply.error =
        fmt::format("prefill server answered {}: {}", answer.status, short_body(answer.body));
  } else {
    auto parsed = parse_prefill_response(answer.body);
    if (auto* error = std::get_if<std::string>(&parsed)) {
      reply.error = std::move(*error);
    } else {
      reply.params = std::move(std::get<disagg::KvTransferParams>(parsed));
    }
  }
  return reply;
}

disagg::MetadataReply to_metadata_reply(const disagg::PeerAddress& peer, Answer answer) {
  if (!answer.error.empty()) return std::move(answer.error);
  if (answer.status != 200) {
    return fmt::format("metadata request to {} answered {}: {}", peer.to_string(), answer.status,
                       short_body(answer.body));
  }
  auto parsed = parse_kv_metadata(answer.body);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return fmt::format("metadata from {}: {}", peer.to_string(), *error);
  }
  return std::move(std::get<disagg::KvMetadata>(parsed));
}

// What the coroutines share with the client. `io` outlives every coroutine: the destructor
// joins the thread that runs them.
struct ClientState {
  explicit ClientState(PeerClientConfig c) : config(std::move(c)), work(io.get_executor()) {}

  const PeerClientConfig config;
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::atomic<CallId> next_call_id{1};
  // The client's thread only.
  std::unordered_map<CallId, std::weak_ptr<Exchange>> exchanges;
  bool shutting_down = false;
  std::thread thread;
};

// Connects to the peer: a numeric address directly, a name through the resolver. An empty
// error code on success.
asio::awaitable<beast::error_code> connect(Exchange& x, const disagg::PeerAddress& peer,
                                           std::string& failure_text) {
  const std::string host(bare_host(peer.host));
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) {
    auto [connect_ec] =
        co_await x.stream.async_connect(tcp::endpoint(address, peer.port), kAsTuple);
    if (connect_ec) failure_text = fmt::format("cannot connect to {}", peer.to_string());
    co_return connect_ec;
  }
  auto [resolve_ec, endpoints] =
      co_await x.resolver.async_resolve(host, std::to_string(peer.port), kAsTuple);
  if (resolve_ec) {
    failure_text = fmt::format("cannot resolve {}", host);
    co_return resolve_ec;
  }
  if (x.abort != Abort::kNone) co_return asio::error::operation_aborted;
  auto [connect_ec, endpoint] = co_await x.stream.async_connect(endpoints, kAsTuple);
  if (connect_ec) failure_text = fmt::format("cannot connect to {}", peer.to_string());
  co_return connect_ec;
}

http::request<http::string_body> make_request(const PeerClientConfig& config, Target& target) {
  http::request<http::string_body> request{target.method, target.path, 11};
  request.set(http::field::host, host_header(target.peer));
  request.set(http::field::user_agent, "troupe");
  request.keep_alive(false);  // Connection: close
  if (!config.api_key.empty()) request.set(http::field::authorization, "Bearer " + config.api_key);
  if (target.method == http::verb::post) {
    request.set(http::field::content_type, "application/json");
    request.body() = std::move(target.body);
  }
  request.prepare_payload();
  return request;
}

// One HTTP exchange.
asio::awaitable<Answer> run_exchange(ClientState* state, CallId call_id, Target target) {
  if (state->shutting_down) co_return failure(std::string(describe(Abort::kShuttingDown)));
  auto x = std::make_shared<Exchange>(state->io);
  state->exchanges.emplace(call_id, x);
  const auto deadline = Clock::now() + target.timeout;
  const std::string where = target.peer.to_string();

  x->stream.expires_after(std::min(state->config.connect_timeout, target.timeout));
  std::string connect_failure;
  const beast::error_code connect_ec = co_await connect(*x, target.peer, connect_failure);
  if (x->abort != Abort::kNone) co_return failure(std::string(describe(x->abort)));
  if (connect_ec == beast::error::timeout) {
    co_return failure(fmt::format("connecting to {} timed out after {} ms", where,
                                  std::min(state->config.connect_timeout, target.timeout).count()));
  }
  if (connect_ec) co_return failure(fmt::format("{}: {}", connect_failure, connect_ec.message()));

  x->stream.expires_at(deadline);
  auto request = make_request(state->config, target);
  auto [write_ec, written] = co_await http::async_write(x->stream, request, kAsTuple);
  if (x->abort != Abort::kNone) co_return failure(std::string(describe(x->abort)));
  if (write_ec == beast::error::timeout) {
    co_return failure(
        fmt::format("sending to {} timed out after {} ms", where, target.timeout.count()));
  }
  if (write_ec) {
    co_return failure(fmt::format("sending to {} failed: {}", where, write_ec.message()));
  }

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(state->config.max_response_bytes);
  auto [read_ec, read] = co_await http::async_read(x->stream, buffer, parser, kAsTuple);
  if (x->abort != Abort::kNone) co_return failure(std::string(describe(x->abort)));
  if (read_ec == beast::error::timeout) {
    co_return failure(
        fmt::format("no answer from {}: timed out after {} ms", where, target.timeout.count()));
  }
  if (read_ec == http::error::body_limit) {
    co_return failure(
        fmt::format("{} answered more than {} bytes", where, state->config.max_response_bytes));
  }
  if (read_ec) {
    co_return failure(fmt::format("reading {}'s answer failed: {}", where, read_ec.message()));
  }
  beast::error_code ignored;
  x->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  x->stream.close();
  http::response<http::string_body> response = parser.release();
  co_return Answer{.status = static_cast<int>(response.result_int()),
                   .body = std::move(response.body()),
                   .error = {}};
}

// Starts an exchange; `finish` runs once on the client's thread with its Answer.
template <class Finish>
void spawn_exchange(ClientState* state, CallId call_id, Target target, Finish finish) {
  asio::co_spawn(state->io, run_exchange(state, call_id, std::move(target)),
                 [state, call_id, finish = std::move(finish)](std::exception_ptr error,
                                                              Answer answer) mutable {
                   state->exchanges.erase(call_id);
                   if (error) answer = failure(describe(error));
                   finish(std::move(answer));
                 });
}

}  // namespace

struct HttpPeerClient::Impl : ClientState {
  using ClientState::ClientState;
};

HttpPeerClient::HttpPeerClient(PeerClientConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

HttpPeerClient::~HttpPeerClient() {
  asio::post(impl_->io, [impl = impl_.get()] {
    impl->shutting_down = true;
    for (auto& [call_id, weak] : impl->exchanges) {
      if (auto x = weak.lock()) x->close(Abort::kShuttingDown);
    }
  });
  impl_->work.reset();  // run() returns once every call has finished
  impl_->thread.join();
}

HttpPeerClient::CallId HttpPeerClient::prefill(disagg::PrefillCall call,
                                               std::function<void(disagg::PrefillReply)> done) {
  const CallId call_id = impl_->next_call_id.fetch_add(1, std::memory_order_relaxed);
  Target target{.peer = call.peer,
                .method = http::verb::post,
                .path = "/v1/completions",
                .body = prefill_request_json(call),
                .timeout = call.timeout};
  spawn_exchange(impl_.get(), call_id, std::move(target), [done = std::move(done)](Answer answer) {
    deliver(done, to_prefill_reply(std::move(answer)));
  });
  return call_id;
}

void HttpPeerClient::cancel(CallId call_id) {
  // NOTE: a call spawned before this cancel has registered by the time this runs: co_spawn
  // starts it through the same queue (or inline, on the client's thread).
  asio::post(impl_->io, [impl = impl_.get(), call_id] {
    const auto it = impl->exchanges.find(call_id);
    if (it == impl->exchanges.end()) return;
    if (auto x = it->second.lock()) x->close(Abort::kCancelled);
  });
}

void HttpPeerClient::fetch_metadata(disagg::PeerAddress peer, std::chrono::milliseconds timeout,
                                    std::function<void(disagg::MetadataReply)> done) {
  const CallId call_id = impl_->next_call_id.fetch_add(1, std::memory_order_relaxed);
  Target target{.peer = peer,
                .method = http::verb::get,
                .path = "/v1/kv/metadata",
                .body = {},
                .timeout = timeout};
  spawn_exchange(impl_.get(), call_id, std::move(target),
                 [peer, done = std::move(done)](Answer answer) {
                   deliver(done, to_metadata_reply(peer, std::move(answer)));
                 });
}

void HttpPeerClient::release(disagg::PeerAddress peer, std::string remote_request_id) {
  const CallId call_id = impl_->next_call_id.fetch_add(1, std::memory_order_relaxed);
  JsonWriter body;
  body.begin_object().field("remote_request_id", remote_request_id).end_object();
  Target target{.peer = peer,
                .method = http::verb::post,
                .path = "/v1/kv/release",
                .body = body.take(),
                .timeout = impl_->config.release_timeout};
  spawn_exchange(impl_.get(), call_id, std::move(target),
                 [peer, remote_request_id = std::move(remote_request_id)](Answer answer) {
                   if (!answer.error.empty()) {
                     spdlog::debug("peer client: releasing {} on {} failed: {}", remote_request_id,
                                   peer.to_string(), answer.error);
                   } else if (answer.status < 200 || answer.status >= 300) {
                     spdlog::debug("peer client: releasing {} on {}: answered {}: {}",
                                   remote_request_id, peer.to_string(), answer.status,
                                   short_body(answer.body));
                   }
                 });
}

}  // namespace troupe::net

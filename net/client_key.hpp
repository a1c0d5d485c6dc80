// The fair-share client of a request (issue 13): who the scheduler's round robin and
// api.max_waiting_per_client count a request against.
//   1. the API key: its configured name when the server authenticated the request ("key:NAME",
//      issue 16), else, when the request carries one the server does not check
//      (`Authorization: Bearer KEY`: what every OpenAI client sends), its hash,
//   2. else the OpenAI `user` field,
//   3. else the connection (a WebSocket session, or one HTTP keep-alive connection).
// A key never appears in the result (it shows in logs and `troupe admin requests`): it becomes
// "key:" and 16 hex digits of a hash salted per process, stable while the server runs.
//
// Thread-safety: pure apart from the salt, drawn once (thread-safe static); any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::net {

// `key_name` is the authenticated key's name ("" when the server needs no key);
// `authorization` the header's value ("" when absent); `connection` a label such as "conn:12"
// or "ws:3".
std::string client_key(std::string_view key_name, std::string_view authorization,
                       std::string_view user, std::string_view connection);

// The label of an HTTP connection ("conn:12"), for client_key()'s last resort.
std::string http_connection_label(uint64_t connection_id);

}  // namespace troupe::net

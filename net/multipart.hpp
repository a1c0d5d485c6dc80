// A strict parser for `multipart/form-data` request bodies (RFC 7578 over RFC 2046), as
// OpenAI's `POST /v1/files` receives them from the official clients (httpx: a `purpose` text
// field, then a `file` part with a filename and a Content-Type).
//
// The body's shape:
//
//   [preamble CRLF] "--" boundary padding CRLF      <- first delimiter
//   header-line CRLF ... CRLF                          <- the part's header block (<= 8 KiB)
//   body bytes                                         <- anything but CRLF "--" boundary
//   CRLF "--" boundary padding CRLF                    <- next delimiter, next part ...
//   CRLF "--" boundary "--" padding [CRLF epilogue]    <- close delimiter
//
// (padding: spaces and tabs, RFC 2046's transport-padding). A part's body is returned as a view
// into the request body, never copied; only names, filenames and content types are copied.
// Delimiters are found with one forward Boyer-Moore search per part, so the time is linear in
// the body's size whatever bytes and boundary a client picks (a 100 MB upload is one pass).
//
// Thread-safety: pure functions; any thread may call them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace troupe::net {

struct MultipartPart {
  std::string name;                     // Content-Disposition's `name` parameter
  std::optional<std::string> filename;  // `filename`, or `filename*` decoded (RFC 8187) to UTF-8
  std::string content_type;             // the part's Content-Type; "" when absent (text/plain)
  std::string_view body;                // a view into the request body: no copy
};

// What is wrong with the body or its Content-Type, in words fit for a 400's message.
struct MultipartError {
  std::string message;
};

// The parts of `body`, in order. `content_type` is the request's Content-Type header value,
// e.g. `multipart/form-data; boundary=----abc` (the boundary may be quoted). Refused: another
// media type; a missing, repeated or malformed boundary (1..70 characters of RFC 2046's
// bchars); no first or no close delimiter; a delimiter followed by anything but padding and
// CRLF (or "--"); no parts or more than `max_parts`; a header block over 8 KiB or not ended by
// an empty line; a header line with a bare CR or LF, a control character or no colon; a part
// without exactly one `Content-Disposition: form-data; name=...`; a Content-Transfer-Encoding
// other than 7bit, 8bit or binary. The preamble and the epilogue are ignored.
std::variant<std::vector<MultipartPart>, MultipartError> parse_multipart_form(
    std::string_view body, std::string_view content_type, size_t max_parts = 16);

}  // namespace troupe::net

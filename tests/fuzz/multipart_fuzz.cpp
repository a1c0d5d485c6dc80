// Fuzzes the multipart/form-data parser (net/multipart.*): POST /v1/files bodies. Input: one
// byte choosing the request's Content-Type (and so the boundary), then the body.
// Properties beyond "no crash, no UB, no leak":
//   - an error is a non-empty message of printable ASCII (it goes into a 400's JSON body);
//   - an accepted body has 1..max_parts parts, each body a view inside the input that holds no
//     delimiter (CRLF "--" boundary);
//   - the parts written back as a form (names quoted, a filename holding control characters as
//     filename*, which only filename* can carry) parse to equal parts.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/multipart.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

constexpr size_t kMaxParts = 4;  // reachable within -max_len

struct FormType {
  std::string_view content_type;
  std::string_view boundary;  // "" where the Content-Type is refused
};

constexpr std::array<FormType, 6> kFormTypes = {{
    {"multipart/form-data; boundary=abc", "abc"},
    {"multipart/form-data; boundary=\"a b:c\"", "a b:c"},
    {"Multipart/Form-Data; charset=utf-8; BOUNDARY=--x", "--x"},
    {"multipart/form-data; boundary=-", "-"},
    {"multipart/form-data", ""},
    {"application/x-www-form-urlencoded; boundary=abc", ""},
}};

bool is_control(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return (byte < 0x20 && c != '\t') || byte == 0x7f;
}

std::string as_quoted_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string percent_encoded(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    out += '%';
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

std::string written_back(const std::vector<net::MultipartPart>& parts, std::string_view boundary) {
  std::string body;
  for (const net::MultipartPart& part : parts) {
    body += "--" + std::string(boundary) +
            "\r\nContent-Disposition: form-data; name=" + as_quoted_string(part.name);
    if (part.filename) {
      const bool needs_extended =
          std::any_of(part.filename->begin(), part.filename->end(), is_control);
      body += needs_extended ? "; filename*=UTF-8''" + percent_encoded(*part.filename)
                             : "; filename=" + as_quoted_string(*part.filename);
    }
    body += "\r\n";
    if (!part.content_type.empty()) body += "Content-Type: " + part.content_type + "\r\n";
    body += "\r\n" + std::string(part.body) + "\r\n";
  }
  return body + "--" + std::string(boundary) + "--\r\n";
}

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const FormType& form = kFormTypes[data[0] % kFormTypes.size()];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

  auto parsed = net::parse_multipart_form(body, form.content_type, kMaxParts);
  if (const auto* error = std::get_if<net::MultipartError>(&parsed)) {
    TROUPE_FUZZ_CHECK(!error->message.empty(), "empty error message");
    for (const char c : error->message) {
      TROUPE_FUZZ_CHECK(c >= 0x20 && c <= 0x7e, "error message byte 0x%02x: %s",
                        static_cast<unsigned char>(c), error->message.c_str());
    }
    return;
  }
  TROUPE_FUZZ_CHECK(!form.boundary.empty(), "Content-Type '%s' accepted",
                    std::string(form.content_type).c_str());
  const auto& parts = std::get<std::vector<net::MultipartPart>>(parsed);
  TROUPE_FUZZ_CHECK(!parts.empty() && parts.size() <= kMaxParts, "%zu parts", parts.size());
  const std::string delimiter = "\r\n--" + std::string(form.boundary);
  for (const net::MultipartPart& part : parts) {
    TROUPE_FUZZ_CHECK(part.body.data() >= body.data() &&
                          part.body.data() + part.body.size() <= body.data() + body.size(),
                      "a part's body lies outside the input");
    TROUPE_FUZZ_CHECK(part.body.find(delimiter) == std::string_view::npos,
                      "a part's body holds the delimiter");
  }

  const std::string again = written_back(parts, form.boundary);
  auto reparsed = net::parse_multipart_form(again, form.content_type, kMaxParts);
  const auto* error = std::get_if<net::MultipartError>(&reparsed);
  TROUPE_FUZZ_CHECK(error == nullptr, "written back, refused: %s", error->message.c_str());
  const auto& reparts = std::get<std::vector<net::MultipartPart>>(reparsed);
  TROUPE_FUZZ_CHECK(reparts.size() == parts.size(), "%zu parts, then %zu", parts.size(),
                    reparts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    TROUPE_FUZZ_CHECK(reparts[i].name == parts[i].name, "part %zu's name changed", i);
    TROUPE_FUZZ_CHECK(reparts[i].filename == parts[i].filename, "part %zu's filename changed", i);
    TROUPE_FUZZ_CHECK(reparts[i].content_type == parts[i].content_type,
                      "part %zu's content type changed", i);
    TROUPE_FUZZ_CHECK(reparts[i].body == parts[i].body, "part %zu's body changed", i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("parse_multipart_form", size, 10.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}

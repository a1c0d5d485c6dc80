// parse_multipart_form: multipart/form-data bodies (RFC 7578, RFC 2046) as the openai Python
// client (httpx) sends them to POST /v1/files, and every way such a body can be refused.
#include "net/multipart.hpp"

#include <string>

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

constexpr std::string_view kBoundary = "--------------------------8f0d4c1b2a3e4f5061728394a5b6c7d8";

std::string content_type_for(std::string_view boundary) {
  return "multipart/form-data; boundary=" + std::string(boundary);
}

// A part as httpx writes it, without the delimiter before it or the CRLF after it.
std::string text_field(std::string_view name, std::string_view value) {
  return "Content-Disposition: form-data; name=\"" + std::string(name) + "\"\r\n\r\n" +
         std::string(value);
}

// Parts joined by delimiter lines, ended by the close delimiter and CRLF (httpx's layout).
std::string form_body(const std::vector<std::string>& parts,
                      std::string_view boundary = kBoundary) {
  std::string body;
  for (const std::string& part : parts) {
    body += "--" + std::string(boundary) + "\r\n" + part + "\r\n";
  }
  return body + "--" + std::string(boundary) + "--\r\n";
}

std::vector<MultipartPart> parts_of(std::string_view body, std::string_view content_type,
                                    size_t max_parts = 16) {
  auto parsed = parse_multipart_form(body, content_type, max_parts);
  if (const auto* error = std::get_if<MultipartError>(&parsed)) {
    ADD_FAILURE() << "refused: " << error->message;
    return {};
  }
  return std::get<std::vector<MultipartPart>>(std::move(parsed));
}

// The refusal's message; "" (and a test failure) when the body was accepted.
std::string error_of(std::string_view body, std::string_view content_type, size_t max_parts = 16) {
  auto parsed = parse_multipart_form(body, content_type, max_parts);
  if (const auto* error = std::get_if<MultipartError>(&parsed)) {
    EXPECT_FALSE(error->message.empty());
    return error->message;
  }
  ADD_FAILURE() << "accepted " << std::get<std::vector<MultipartPart>>(parsed).size() << " parts";
  return "";
}

bool points_into(std::string_view view, std::string_view whole) {
  return view.data() >= whole.data() && view.data() + view.size() <= whole.data() + whole.size();
}

TEST(Multipart, FilesCreateBodyAsHttpxWritesItParses) {
  // openai.files.create(file=open("batch.jsonl", "rb"), purpose="batch"): httpx writes the data
  // fields first, then the files; the JSONL holds CRLFs and a line that starts with "--".
  const std::string jsonl =
      "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\"}\r\n"
      "--not a boundary, just a line\r\n"
      "------------------------------------------------\r\n"  // the boundary's dashes, and more
      "\r\n"
      "{\"custom_id\": \"r2\"}\n";
  const std::string body =
      "--" + std::string(kBoundary) +
      "\r\n"
      "Content-Disposition: form-data; name=\"purpose\"\r\n"
      "\r\n"
      "batch\r\n"
      "--" +
      std::string(kBoundary) +
      "\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"batch.jsonl\"\r\n"
      "Content-Type: application/octet-stream\r\n"
      "\r\n" +
      jsonl + "\r\n--" + std::string(kBoundary) + "--\r\n";

  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_EQ(parts[0].filename, std::nullopt);
  EXPECT_EQ(parts[0].content_type, "");
  EXPECT_EQ(parts[0].body, "batch");
  EXPECT_EQ(parts[1].name, "file");
  EXPECT_EQ(parts[1].filename, "batch.jsonl");
  EXPECT_EQ(parts[1].content_type, "application/octet-stream");
  EXPECT_EQ(parts[1].body, jsonl);
}

TEST(Multipart, BodiesAreViewsIntoTheRequestBody) {
  const std::string body = form_body({text_field("purpose", "batch"),
                                      "Content-Disposition: form-data; name=\"file\"; "
                                      "filename=\"a.jsonl\"\r\nContent-Type: application/jsonl"
                                      "\r\n\r\n{}\n"});
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 2u);
  for (const MultipartPart& part : parts) EXPECT_TRUE(points_into(part.body, body));
  EXPECT_EQ(parts[0].body.data(), body.data() + body.find("batch"));
  EXPECT_EQ(parts[1].body.data(), body.data() + body.find("{}\n"));
  EXPECT_EQ(parts[1].content_type, "application/jsonl");
}

TEST(Multipart, EmptyPartBodyIsAnEmptyView) {
  const std::string body = form_body({text_field("purpose", "")});  // the views point into it
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, "");
}

TEST(Multipart, PartMayEndRightAfterItsHeaders) {
  // RFC 2046: `body-part := headers [CRLF *OCTET]`; with no body, the empty line after the
  // headers is the next delimiter's CRLF.
  const std::string body = "--abc\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n--abc\r\n" +
                           text_field("b", "2") + "\r\n--abc--";
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for("abc"));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "a");
  EXPECT_EQ(parts[0].body, "");
  EXPECT_TRUE(points_into(parts[0].body, body));
  EXPECT_EQ(parts[1].body, "2");
}

TEST(Multipart, QuotedBoundaryAndCaseInsensitiveMediaTypeAreAccepted) {
  // ':' and '?' are bchars but not token characters: such a boundary must be quoted.
  const std::string boundary = "simple boundary:with?odd=chars";
  const std::string body = form_body({text_field("purpose", "batch")}, boundary);
  const std::vector<MultipartPart> parts =
      parts_of(body, "Multipart/Form-Data ; charset=utf-8; BOUNDARY=\"" + boundary + "\"");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, "batch");
}

TEST(Multipart, ContentTypeBoundaryMayBeQuotedWithEscapes) {
  const std::string body = form_body({text_field("purpose", "batch")}, "a\"b");
  EXPECT_EQ(error_of(body, R"(multipart/form-data; boundary="a\"b")"),
            "boundary 'a\"b' must be 1 to 70 letters, digits or '()+_,-./:=? (RFC 2046), not "
            "ending in a space");
  const std::string plain = form_body({text_field("purpose", "batch")}, "ab");
  EXPECT_EQ(parts_of(plain, R"(multipart/form-data; boundary="a\b")").size(), 1u);
}

TEST(Multipart, SeventyCharacterBoundaryIsTheLongestAccepted) {
  const std::string longest(70, 'x');
  EXPECT_EQ(parts_of(form_body({text_field("a", "1")}, longest), content_type_for(longest)).size(),
            1u);
  const std::string too_long(71, 'x');
  EXPECT_NE(error_of(form_body({text_field("a", "1")}, too_long), content_type_for(too_long))
                .find("1 to 70"),
            std::string::npos);
}

TEST(Multipart, FilenameStarIsDecodedAndWinsOverFilename) {
  const std::string body = form_body(
      {"Content-Disposition: form-data; name=\"file\"; filename=\"fallback.jsonl\"; "
       "filename*=UTF-8''%E2%82%AC%20rates.jsonl\r\n\r\nx",
       "Content-Disposition: form-data; name=\"file2\"; filename*=iso-8859-1'fr'caf%E9.txt"
       "\r\n\r\ny"});
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].filename, "\u20ac rates.jsonl");
  EXPECT_EQ(parts[1].filename, "caf\u00e9.txt");
}

TEST(Multipart, MalformedFilenameStarIsRefused) {
  for (const char* value : {"UTF-8''%E2%82", "UTF-8''%zz", "UTF-8''%4", "UTF-8''a b", "UTF-16''abc",
                            "abc", "UTF-8'abc"}) {
    const std::string body =
        form_body({"Content-Disposition: form-data; name=\"f\"; filename*=" + std::string(value) +
                   "\r\n\r\nx"});
    EXPECT_NE(error_of(body, content_type_for(kBoundary)).find("filename*"), std::string::npos)
        << value;
  }
}

TEST(Multipart, QuotedParametersUndoBackslashEscapes) {
  // httpx writes a filename's backslash as "\\"; a quote may come escaped by other clients.
  const std::string body = form_body(
      {R"(content-disposition:form-data;name="say \"hi\"" ; FILENAME="C:\\tmp\\b.jsonl")"
       "\r\n\r\nx",
       "Content-Disposition: form-data; name=token_name; filename=\"a;b=c.txt\"\r\n\r\ny"});
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "say \"hi\"");
  EXPECT_EQ(parts[0].filename, "C:\\tmp\\b.jsonl");
  EXPECT_EQ(parts[1].name, "token_name");
  EXPECT_EQ(parts[1].filename, "a;b=c.txt");
}

TEST(Multipart, HeaderNamesAreCaseInsensitiveAndOtherHeadersIgnored) {
  const std::string body =
      form_body({"X-Trace: 1\r\nCONTENT-TYPE:  text/plain; charset=utf-8 \r\ncontent-DISPOSITION: "
                 "Form-Data; name=\"purpose\"\r\nContent-Transfer-Encoding: binary\r\n\r\nbatch"});
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_EQ(parts[0].content_type, "text/plain; charset=utf-8");
}

TEST(Multipart, PreambleEpilogueAndTransportPaddingAreIgnored) {
  const std::string boundary = "abc";
  const std::string body = "This is the preamble; its --abc is not after a CRLF.\r\n--abc \t\r\n" +
                           text_field("purpose", "batch") +
                           "\r\n--abc--  \r\nThis is the epilogue.\r\n--abc\r\n";
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(boundary));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, "batch");
  // The close delimiter may end the body, with or without CRLF.
  EXPECT_EQ(parts_of("--abc\r\n" + text_field("a", "1") + "\r\n--abc--",
                     "multipart/form-data;"
                     "boundary=abc")
                .size(),
            1u);
}

TEST(Multipart, BoundaryLookalikesInsideABodyStayInTheBody) {
  const std::string content =
      "--ab-c at the start: no delimiter, and a CRLF -- abc\r\n"
      "\r\n--ab\r\n"     // a prefix of the delimiter
      "\r\n-abc\r\n"     // one dash
      "\n--abc\r\n"      // LF without CR
      "\r--abc\r\n"      // CR without LF
      "x--abc--\r\n"     // not at a line start
      "\r\r\n\n\r\n\r";  // stray line ends, ending in a CR just before the delimiter's CRLF
  const std::string body = form_body({text_field("file", content)}, "abc");  // the views' bytes
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for("abc"));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, content);
}

TEST(Multipart, TenMegabyteBodyParsesInOnePass) {
  // Many near-delimiters ("\r\n--" followed by a wrong boundary) and CRs: a scan that restarts
  // at each of them would be quadratic.
  std::string content;
  content.reserve(10 << 20);
  while (content.size() < (10 << 20))
    content += "\r\n--" + std::string(kBoundary.substr(0, 40)) + "\r\r";
  const std::string body = form_body(
      {text_field("purpose", "batch"),
       "Content-Disposition: form-data; name=\"file\"; filename=\"big.jsonl\"\r\n\r\n" + content});
  const std::vector<MultipartPart> parts = parts_of(body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].body.size(), content.size());
  EXPECT_EQ(parts[1].body.data(), body.data() + body.find(content));
}

TEST(Multipart, BodiesChosenAgainstTheSearchStillParse) {
  // A body of CRs (a candidate delimiter start at every byte), and a boundary of 70 'a's over a
  // body of 'a's (the worst case of Boyer-Moore-Horspool's skips).
  const std::string crs(10 << 20, '\r');
  const std::string cr_body = form_body({text_field("file", crs)});
  std::vector<MultipartPart> parts = parts_of(cr_body, content_type_for(kBoundary));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body.size(), crs.size());
  const std::string boundary(70, 'a');
  const std::string as(10 << 20, 'a');
  const std::string a_body = form_body({text_field("file", as)}, boundary);
  parts = parts_of(a_body, content_type_for(boundary));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body.size(), as.size());
}

TEST(Multipart, RequestContentTypeMustBeMultipartFormDataWithABoundary) {
  const std::string body = form_body({text_field("purpose", "batch")});
  EXPECT_EQ(error_of(body, ""),
            "a multipart/form-data body needs a Content-Type header with its boundary");
  EXPECT_EQ(error_of(body, "application/json"),
            "Content-Type 'application/json' is not multipart/form-data");
  EXPECT_EQ(error_of(body, "multipart/mixed; boundary=" + std::string(kBoundary)),
            "Content-Type 'multipart/mixed' is not multipart/form-data");
  EXPECT_EQ(error_of(body, "multipart/form-data"),
            "Content-Type 'multipart/form-data' has no boundary parameter");
  EXPECT_EQ(error_of(body, "multipart/form-data; charset=utf-8"),
            "Content-Type 'multipart/form-data; charset=utf-8' has no boundary parameter");
  EXPECT_NE(error_of(body, "multipart/form-data; boundary=").find("neither a token nor quoted"),
            std::string::npos);
  EXPECT_NE(error_of(body, "multipart/form-data; boundary=\"\"").find("1 to 70"),
            std::string::npos);
  EXPECT_NE(error_of(body, "multipart/form-data; boundary=\"ends in space \"").find("1 to 70"),
            std::string::npos);
  EXPECT_NE(error_of(body, "multipart/form-data; boundary=\"a*b\"").find("1 to 70"),
            std::string::npos);
  EXPECT_NE(error_of(body, "multipart/form-data; boundary=\"unterminated").find("unterminated"),
            std::string::npos);
  EXPECT_NE(error_of(body, "multipart/form-data; boundary").find("not name=value"),
            std::string::npos);
}

TEST(Multipart, BoundaryGivenTwiceIsRefused) {
  const std::string body = form_body({text_field("purpose", "batch")});
  const std::string message =
      error_of(body, content_type_for(kBoundary) + "; Boundary=" + std::string(kBoundary));
  EXPECT_TRUE(message.starts_with("Content-Type 'multipart/form-data; boundary=---")) << message;
  EXPECT_TRUE(message.ends_with("...' is malformed: parameter 'Boundary' appears twice"))
      << message;
}

TEST(Multipart, MissingDelimitersAreRefused) {
  const std::string ct = content_type_for("abc");
  EXPECT_EQ(error_of("no delimiter at all", ct), "the body holds no delimiter line '--abc'");
  EXPECT_EQ(error_of("", ct), "the body holds no delimiter line '--abc'");
  EXPECT_EQ(error_of("--abc\r\n" + text_field("a", "1"), ct),
            "part 1 is not followed by a delimiter: the close delimiter '--abc--' is missing");
  EXPECT_EQ(error_of("--abc\r\n" + text_field("a", "1") + "\r\n--abc\r\n" + text_field("b", "2") +
                         "\r\n--ab",
                     ct),
            "part 2 is not followed by a delimiter: the close delimiter '--abc--' is missing");
  EXPECT_EQ(error_of("--abc\r\n" + text_field("a", "1") + "\r\n--abc", ct),
            "the body ends after a delimiter: the close delimiter '--abc--' is missing");
  EXPECT_EQ(error_of("--abc--\r\n", ct), "the body has no parts, only a close delimiter");
}

TEST(Multipart, DelimiterFollowedByOtherTextIsRefused) {
  const std::string ct = content_type_for("abc");
  // "--abcd" is the delimiter "--abc" and then "d": a boundary must not appear in a part.
  EXPECT_EQ(error_of("--abc\r\n" + text_field("a", "1") + "\r\n--abcd\r\n--abc--", ct),
            "delimiter '--abc' is followed by 'd?"
            "?--abc--' instead of CRLF (the boundary must "
            "not appear inside a part)");
  EXPECT_NE(
      error_of("--abcd\r\n" + text_field("a", "1") + "\r\n--abc--", ct).find("instead of CRLF"),
      std::string::npos);
  EXPECT_EQ(error_of("--abc\r\n" + text_field("a", "1") + "\r\n--abc--x", ct),
            "the close delimiter '--abc--' is followed by 'x' instead of CRLF");
  EXPECT_NE(error_of("--abc\r\n" + text_field("a", "1") + "\r\n--abc\n" + text_field("b", "2") +
                         "\r\n--abc--",
                     ct)
                .find("instead of CRLF"),
            std::string::npos);
}

TEST(Multipart, PartWithoutFormDataDispositionIsRefused) {
  const std::string ct = content_type_for("abc");
  EXPECT_EQ(error_of(form_body({"Content-Type: text/plain\r\n\r\nbatch"}, "abc"), ct),
            "part 1 has no Content-Disposition header (form-data; name=...)");
  EXPECT_EQ(error_of(form_body({text_field("a", "1"), "\r\nno headers"}, "abc"), ct),
            "part 2 has no Content-Disposition header (form-data; name=...)");
  EXPECT_EQ(
      error_of(form_body({"Content-Disposition: attachment; name=\"a\"\r\n\r\n1"}, "abc"), ct),
      "part 1's Content-Disposition is 'attachment', not form-data");
  EXPECT_EQ(
      error_of(form_body({"Content-Disposition: form-data; filename=\"a\"\r\n\r\n1"}, "abc"), ct),
      "part 1's Content-Disposition has no name parameter");
  EXPECT_EQ(error_of(form_body({"Content-Disposition: form-data; name=\"a\"\r\n"
                                "Content-Disposition: form-data; name=\"b\"\r\n\r\n1"},
                               "abc"),
                     ct),
            "part 1 has two Content-Disposition headers");
  EXPECT_EQ(error_of(form_body({"Content-Disposition: form-data; name=\"a\"; name=\"b\"\r\n\r\n1"},
                               "abc"),
                     ct),
            "part 1's Content-Disposition is malformed: parameter 'name' appears twice");
  EXPECT_EQ(error_of(form_body({"Content-Disposition: form-data; name=\"a\r\n\r\n1"}, "abc"), ct),
            "part 1's Content-Disposition is malformed: parameter 'name' has an unterminated "
            "quoted value");
}

TEST(Multipart, HeaderValuesHaveAtMostSixteenParameters) {
  const std::string ct = content_type_for("abc");
  std::string parameters = "; name=a";
  for (int i = 1; i < 16; ++i) parameters += "; p" + std::to_string(i) + "=v";
  EXPECT_EQ(
      parts_of(form_body({"Content-Disposition: form-data" + parameters + "\r\n\r\n1"}, "abc"), ct)
          .size(),
      1u);
  EXPECT_EQ(error_of(form_body({"Content-Disposition: form-data" + parameters + "; p16=v\r\n\r\n1"},
                               "abc"),
                     ct),
            "part 1's Content-Disposition is malformed: more than 16 parameters");
}

TEST(Multipart, MalformedHeaderLinesAreRefused) {
  const std::string ct = content_type_for("abc");
  const std::string disposition = "Content-Disposition: form-data; name=\"a\"";
  EXPECT_EQ(error_of(form_body({"X-A: 1\nX-B: 2\r\n" + disposition + "\r\n\r\n1"}, "abc"), ct),
            "header line 1 of part 1 has a bare CR or LF (header lines end with CRLF)");
  EXPECT_EQ(error_of(form_body({disposition + "\r\nX-A: 1\r2\r\n\r\n1"}, "abc"), ct),
            "header line 2 of part 1 has a bare CR or LF (header lines end with CRLF)");
  EXPECT_EQ(error_of(form_body({disposition + "\r\nno colon here\r\n\r\n1"}, "abc"), ct),
            "header line 2 of part 1 'no colon here' is not 'Name: value'");
  EXPECT_EQ(error_of(form_body({disposition + "\r\n folded\r\n\r\n1"}, "abc"), ct),
            "header line 2 of part 1 starts with whitespace (folded header lines are not "
            "accepted)");
  EXPECT_EQ(error_of(form_body({disposition + "\r\nX-A: a\x01z\r\n\r\n1"}, "abc"), ct),
            "header line 2 of part 1 header 'X-A' holds a control character");
  EXPECT_EQ(error_of(form_body({disposition + "\r\nContent-Type:\r\n\r\n1"}, "abc"), ct),
            "part 1 has an empty Content-Type");
  EXPECT_EQ(error_of(form_body({disposition + "\r\nContent-Transfer-Encoding: base64\r\n\r\nMQ=="},
                               "abc"),
                     ct),
            "part 1 has Content-Transfer-Encoding 'base64'; only binary, 8bit and 7bit are "
            "accepted");
}

TEST(Multipart, HeadersWithoutTheEmptyLineAreRefused) {
  const std::string ct = content_type_for("abc");
  EXPECT_EQ(error_of("--abc\r\nContent-Disposition: form-data; name=\"a\"\r\n", ct),
            "the headers of part 1 are not ended by an empty line (CRLF CRLF)");
  // The next delimiter comes before any empty line.
  EXPECT_EQ(error_of("--abc\r\nContent-Disposition: form-data; name=\"a\"\r\n--abc\r\n" +
                         text_field("b", "2") + "\r\n--abc--",
                     ct),
            "the headers of part 1 are not ended by an empty line (CRLF CRLF) before the next "
            "delimiter");
}

TEST(Multipart, HeaderBlockIsLimitedTo8KiB) {
  const std::string ct = content_type_for("abc");
  const std::string disposition = "Content-Disposition: form-data; name=\"a\"\r\n";
  // Header lines of exactly 8192 bytes, CRLFs included, then one byte more.
  const std::string filler = "X-Filler: ";
  const std::string at_limit = disposition + filler +
                               std::string(8192 - disposition.size() - filler.size() - 2, 'x') +
                               "\r\n";
  ASSERT_EQ(at_limit.size(), 8192u);
  EXPECT_EQ(parts_of(form_body({at_limit + "\r\n1"}, "abc"), ct).size(), 1u);
  const std::string over_limit = disposition + filler +
                                 std::string(8193 - disposition.size() - filler.size() - 2, 'x') +
                                 "\r\n";
  EXPECT_EQ(error_of(form_body({over_limit + "\r\n1"}, "abc"), ct),
            "the headers of part 1 exceed 8192 bytes");
}

TEST(Multipart, MoreThanMaxPartsIsRefused) {
  const std::string ct = content_type_for("abc");
  const std::string three =
      form_body({text_field("a", "1"), text_field("b", "2"), text_field("c", "3")}, "abc");
  EXPECT_EQ(parts_of(three, ct, 3).size(), 3u);
  EXPECT_EQ(error_of(three, ct, 2), "the body has more than 2 parts");
  EXPECT_EQ(
      parts_of(form_body(std::vector<std::string>(16, text_field("a", "1")), "abc"), ct).size(),
      16u);
  EXPECT_EQ(error_of(form_body(std::vector<std::string>(17, text_field("a", "1")), "abc"), ct),
            "the body has more than 16 parts");
}

TEST(Multipart, ErrorMessagesShowClientTextAsPrintableAscii) {
  const std::string message = error_of(form_body({text_field("a", "1")}), "text/\xff\x01plain");
  EXPECT_EQ(message, "Content-Type 'text/??plain' is not multipart/form-data");
}

}  // namespace
}  // namespace troupe::net

// xgrammar's logging hooks (XGRAMMAR_LOG_CUSTOMIZE=1), compiled into the xgrammar target itself
// (cmake/TroupeXgrammar.cmake) so the static library always finds them.
//   - Errors (XGRAMMAR_CHECK, LOG(FATAL): a bad schema, regex or grammar) still throw
//     LogFatalError, which xgrammar itself catches in places (support/json_parse.h), but what()
//     is the bare reason, without the timestamp and source path upstream puts in front: it goes
//     to the client in a 400 (GrammarCompiler turns it into an error value). The place in
//     xgrammar's source goes to the debug log.
//   - Warnings go to spdlog instead of std::cerr; info and debug messages to spdlog's debug.
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "support/logging.h"

namespace xgrammar {
namespace {

class BareFatalError : public LogFatalError {
 public:
  using LogFatalError::LogFatalError;
  const char* what() const noexcept override { return std::runtime_error::what(); }
};

// XGRAMMAR_CHECK(cond) << reason gives "Check failed: (cond) is false: reason"; the client
// only needs the reason.
std::string reason_of(const std::string& message) {
  constexpr std::string_view kCheck = "Check failed: ";
  constexpr std::string_view kIsFalse = " is false: ";
  if (message.compare(0, kCheck.size(), kCheck) != 0) return message;
  const auto at = message.find(kIsFalse);
  return at == std::string::npos ? message : message.substr(at + kIsFalse.size());
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  spdlog::debug("xgrammar error at {}:{}: {}", base_name(file), lineno, message);
  throw BareFatalError(file, lineno, reason_of(message));
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  if (level == XGRAMMAR_LOG_LEVEL_WARNING) {
    spdlog::warn("xgrammar {}:{}: {}", base_name(file), lineno, message);
  } else {
    spdlog::debug("xgrammar {}:{}: {}", base_name(file), lineno, message);
  }
}

}  // namespace xgrammar

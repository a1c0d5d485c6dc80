#include "app/file_limit.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <sys/resource.h>

namespace troupe::app {
namespace {

// Linux refuses a soft RLIMIT_NOFILE above fs.nr_open (1048576 by default).
rlim_t kernel_open_file_ceiling() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t value = 0;
  if (in >> value && value > 0) return static_cast<rlim_t>(value);
  return rlim_t{1} << 20;
}

std::string show(uint64_t value) {
  return value == static_cast<uint64_t>(RLIM_INFINITY) ? "unlimited" : std::to_string(value);
}

}  // namespace

OpenFileLimit raise_open_file_limit() {
  OpenFileLimit result;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    result.error = errno;
    return result;
  }
  result.before = result.soft = limit.rlim_cur;
  result.hard = limit.rlim_max;
  const rlim_t target =
      limit.rlim_max == RLIM_INFINITY ? kernel_open_file_ceiling() : limit.rlim_max;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= target) return result;
  limit.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    result.error = errno;
    return result;
  }
  result.soft = target;
  return result;
}

std::string describe(const OpenFileLimit& limit) {
  if (limit.error != 0) {
    return fmt::format("open-file limit {} (hard {}): could not raise it: {}", show(limit.soft),
                       show(limit.hard), std::strerror(limit.error));
  }
  if (limit.soft == limit.before) {
    return fmt::format("open-file limit {} (hard {})", show(limit.soft), show(limit.hard));
  }
  return fmt::format("open-file limit raised from {} to {} (hard {})", show(limit.before),
                     show(limit.soft), show(limit.hard));
}

}  // namespace troupe::app

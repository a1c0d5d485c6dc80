// The process's limit on open files. Every HTTP connection holds a file descriptor, and the usual
// soft limit (1024) is far below both the hard limit (often 524288) and what
// http.max_connections allows; at the limit accept() fails with EMFILE. `troupe serve` raises
// the soft limit to the hard one at start, as nginx (worker_rlimit_nofile) and Go programs do.
//
// Thread-safety: call from main before other threads start (the limit is process-wide).
#pragma once

#include <cstdint>
#include <string>

namespace troupe::app {

struct OpenFileLimit {
  uint64_t before = 0;  // the soft limit found
  uint64_t soft = 0;    // the soft limit now
  uint64_t hard = 0;
  int error = 0;  // errno of a failed setrlimit; 0: none
};

// Raises the soft RLIMIT_NOFILE to the hard limit (to the kernel's fs.nr_open when the hard
// limit is unlimited, as Linux refuses more).
OpenFileLimit raise_open_file_limit();

// One line for the start-up log.
std::string describe(const OpenFileLimit& limit);

}  // namespace troupe::app

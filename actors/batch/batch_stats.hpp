// What the batch actor reports to /metrics and `troupe admin` (actors/batch/batch_actor.hpp).
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace troupe::batch {

struct BatchStats {
  int64_t items_succeeded = 0;  // since start: answered 200 (output files)
  int64_t items_failed = 0;     // since start: answered with an error or expired (error files)
  int64_t items_in_flight = 0;  // in the engine now
  int64_t items_queued = 0;     // pending in live batches, not yet in the engine
  int64_t live_batches = 0;     // validating, in progress, finalizing or cancelling
};

}  // namespace troupe::batch

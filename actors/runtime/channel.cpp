// Non-template parts of the channel.
#include "actors/runtime/channel.hpp"

namespace troupe::actors::runtime {

const char* to_string(SendStatus status) {
  switch (status) {
    case SendStatus::kAccepted: return "accepted";
    case SendStatus::kFull: return "full";
    case SendStatus::kClosed: return "closed";
  }
  return "?";
}

}  // namespace troupe::actors::runtime

// Names of a sequence's states, for logs and the slots view.
#include "actors/scheduler/sequence.hpp"

#include "model/enum_names.hpp"

namespace troupe::scheduler {

constexpr EnumNames<SequenceState, 4> kSequenceStateNames{{{
    {SequenceState::kWaiting, "waiting"}, {SequenceState::kRunning, "running"},
    {SequenceState::kPrefillDone, "prefill_done"}, {SequenceState::kAwaitingKv, "awaiting_kv"}}}};
static_assert(kSequenceStateNames.dense());

std::string_view to_string(SequenceState state) { return kSequenceStateNames.name(state); }

}  // namespace troupe::scheduler

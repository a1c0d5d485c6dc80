#include "actors/batch/batch_actor.hpp"

#include <algorithm>
#include <set>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::batch {
namespace {

// An input file's requests: its non-blank lines (a trailing '\r' dropped), with their 1-based
// line numbers. Validation and every later run split the same bytes the same way.
struct InputLines {
  std::vector<std::string_view> lines;
  std::vector<int64_t> line_numbers;
};

InputLines split_input(std::string_view content) {
  InputLines input;
  int64_t number = 0;
  while (!content.empty()) {
    ++number;
    const size_t end = content.find('\n');
    std::string_view line = content.substr(0, end);
    content = end == std::string_view::npos ? std::string_view{} : content.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    input.lines.push_back(line);
    input.line_numbers.push_back(number);
  }
  return input;
}

// OpenAI stops listing a bad file's problems after this many.
constexpr size_t kMaxListedErrors = 100;

}  // namespace

BatchActor::BatchActor(std::shared_ptr<BatchStore> store, std::shared_ptr<FileStore> files,
                       std::shared_ptr<ItemRunner> runner, BatchActorConfig config,
                       std::function<int64_t()> now, std::function<int64_t()> engine_requests)
    // Room for every in-flight item's completion plus the one coalesced wake: a completion never
    // finds the mailbox full (deliver() would still wait for room if it did).
    : Actor("batch", static_cast<size_t>(std::max(1, config.max_in_flight)) + 2),
      store_(std::move(store)),
      files_(std::move(files)),
      runner_(std::move(runner)),
      config_(config),
      now_(std::move(now)),
      engine_requests_(std::move(engine_requests)),
      planner_(config.max_in_flight) {}

void BatchActor::wake() {
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  if (try_send(BatchWake{}) != actors::runtime::SendStatus::kAccepted) {
    wake_pending_.store(false, std::memory_order_release);  // the tick retries
  }
}

BatchStats BatchActor::stats() const {
  return BatchStats{items_succeeded_.load(std::memory_order_relaxed),
                    items_failed_.load(std::memory_order_relaxed),
                    items_in_flight_.load(std::memory_order_relaxed),
                    items_queued_.load(std::memory_order_relaxed),
                    live_batches_.load(std::memory_order_relaxed)};
}

boost::asio::awaitable<void> BatchActor::tick_loop() {
  std::weak_ptr<Actor<BatchMessage>> weak = weak_from_this();
  const boost::asio::any_io_executor executor = co_await boost::asio::this_coro::executor;
  boost::asio::steady_timer timer(executor);
  for (;;) {
    timer.expires_after(config_.tick);
    auto [ec] = co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    auto self = std::static_pointer_cast<BatchActor>(weak.lock());
    if (ec || !self || self->mailbox().is_closed() || self->cancel_requested()) co_return;
    self->wake();
  }
}

boost::asio::awaitable<void> BatchActor::run() {
  // The ticker's loop holds only a weak reference: it ends with the mailbox. NOTE: no co_await
  // in the co_spawn expression (g++ 12.2 destroys a capturing lambda there twice: TOOLCHAIN.md).
  const boost::asio::any_io_executor executor = co_await boost::asio::this_coro::executor;
  auto ticker = [self = std::static_pointer_cast<BatchActor>(shared_from_this())] { return self->tick_loop(); };
  boost::asio::co_spawn(executor, std::move(ticker), boost::asio::detached);
  refresh();  // resume what a previous run left
  settle();
  for (;;) {
    std::optional<BatchMessage> message = co_await mailbox().receive();
    if (!message) {
      if (mailbox().drained()) break;
      continue;
    }
    if (cancel_requested()) {
      abandon(std::move(*message));
      continue;
    }
    on_message(*message);
    // Everything already queued joins this group commit.
    while (std::optional<BatchMessage> more = mailbox().try_receive()) on_message(*more);
    settle();
  }
  flush();  // what the drain delivered
  publish_stats();
}

boost::asio::awaitable<void> BatchActor::handle(BatchMessage message) {
  on_message(message);
  settle();
  co_return;
}

// After a group of messages: commit what finished, end what is done, start what may start.
void BatchActor::settle() {
  flush();
  finish_idle();
  feed();
  publish_stats();
}

void BatchActor::on_message(BatchMessage& message) {
  if (auto* finished = std::get_if<ItemFinished>(&message)) {
    on_item(*finished);
    return;
  }
  wake_pending_.store(false, std::memory_order_release);
  planner_.release_parked();
  refresh();
}

void BatchActor::on_item(ItemFinished& finished) {
  const ItemEnd end = finished.result.end;
  planner_.finished(finished.batch_id, finished.index, end == ItemEnd::kRetry);
  auto it = live_.find(finished.batch_id);
  if (it == live_.end()) return;
  Live& live = it->second;
  live.handles.erase(finished.index);
  // A cancelled item stays pending in the database: it runs again after a restart, or the
  // batch's ending (cancel, expiry) accounts for it.
  if (end == ItemEnd::kCancelled || end == ItemEnd::kRetry) return;
  const bool succeeded = end == ItemEnd::kSucceeded;
  std::string& lines = succeeded ? live.output_lines : live.error_lines;
  lines += finished.result.line;
  lines += '\n';
  live.outcomes.push_back(ItemOutcome{finished.index, succeeded});
}

// The store's live batches: new ones adopted, cancel requests and expiries acted on.
void BatchActor::refresh() {
  if (!store_->try_become_runner()) {
    if (!standby_logged_) {
      spdlog::info("batches: another server runs the batches of {}; this one stands by", files_->dir().string());
      standby_logged_ = true;
    }
    return;
  }
  const int64_t now = now_();
  for (BatchRecord& record : store_->live()) {
    auto it = live_.find(record.id);
    if (it == live_.end()) {
      adopt(std::move(record));
      continue;
    }
    Live& live = it->second;
    live.record.status = record.status;
    if (record.status == BatchStatus::kCancelling && live.ending == Ending::kNone) end(live, Ending::kCancel);
  }
  for (auto& [id, live] : live_) {
    const bool running = live.record.status == BatchStatus::kInProgress;
    if (running && live.ending == Ending::kNone && now >= live.record.expires_at) end(live, Ending::kExpire);
  }
}

void BatchActor::adopt(BatchRecord record) {
  const std::string id = record.id;
  Live& live = live_.emplace(id, Live{}).first->second;
  live.record = std::move(record);
  switch (live.record.status) {
    case BatchStatus::kValidating:
      validate(live);
      return;
    case BatchStatus::kInProgress:
      if (!load(live)) return;
      if (now_() >= live.record.expires_at) {
        end(live, Ending::kExpire);
        return;
      }
      planner_.add(id, store_->pending_items(id));
      return;
    case BatchStatus::kCancelling:
      if (load(live)) end(live, Ending::kCancel);
      return;
    case BatchStatus::kFinalizing:
      load(live);  // finish_idle() completes it
      return;
    default:
      live_.erase(id);  // terminal: nothing to do
  }
}

// The input file's requests into `live` (and their line numbers when asked); false (and the
// batch failed) when the file cannot be read.
bool BatchActor::read_input(Live& live, std::vector<int64_t>* line_numbers) {
  auto content = files_->read(live.record.owner, live.record.input_file_id);
  if (!content || std::holds_alternative<StorageError>(*content)) {
    fail_now(live, {BatchError{"invalid_file",
                               !content ? fmt::format("The input file {} does not exist.", live.record.input_file_id)
                                        : std::get<StorageError>(*content).message,
                               "input_file_id", std::nullopt}});
    return false;
  }
  live.content = std::move(std::get<std::string>(*content));
  InputLines input = split_input(live.content);
  live.lines = std::move(input.lines);
  if (line_numbers != nullptr) *line_numbers = std::move(input.line_numbers);
  return true;
}

// The batch's journals, cut back to what was committed; false (and the batch failed) when they
// cannot be opened.
bool BatchActor::open_journal(Live& live) {
  auto journal = BatchJournal::open(files_->dir(), live.record.id, live.record.output_bytes,
                                    live.record.error_bytes);
  if (auto* error = std::get_if<StorageError>(&journal)) {
    fail_now(live, {BatchError{"storage_error", error->message, "", std::nullopt}});
    return false;
  }
  live.journal.emplace(std::move(std::get<BatchJournal>(journal)));
  return true;
}

// A batch past validation, resumed: its input and its journals.
bool BatchActor::load(Live& live) { return read_input(live, nullptr) && open_journal(live); }

// validating -> in_progress, or failed with OpenAI's list of the file's problems.
void BatchActor::validate(Live& live) {
  BatchRecord& record = live.record;
  std::vector<int64_t> line_numbers;
  if (!read_input(live, &line_numbers)) return;
  const std::vector<std::string_view>& lines = live.lines;
  std::vector<BatchError> errors;
  if (lines.empty()) {
    errors.push_back({"empty_file", "The input file holds no requests.", "input_file_id", std::nullopt});
  } else if (static_cast<int64_t>(lines.size()) > config_.max_items) {
    errors.push_back({"too_many_requests",
                      fmt::format("The input file holds {} requests; the limit is {} (batches.max_items).",
                                  lines.size(), config_.max_items),
                      "input_file_id", std::nullopt});
  }
  std::set<std::string, std::less<>> custom_ids;
  const bool countable = errors.empty();  // line problems are listed only for a file of a fit size
  for (size_t i = 0; countable && i < lines.size() && errors.size() < kMaxListedErrors; ++i) {
    auto checked = runner_->check_line(lines[i], record.endpoint);
    if (auto* problem = std::get_if<LineProblem>(&checked)) {
      errors.push_back({problem->code, problem->message, problem->param, line_numbers[i]});
    } else if (!custom_ids.insert(std::get<std::string>(checked)).second) {
      errors.push_back({"duplicate_custom_id",
                        fmt::format("The custom_id '{}' is used more than once; each request needs its own.",
                                    std::get<std::string>(checked)),
                        "custom_id", line_numbers[i]});
    }
  }
  if (!errors.empty()) {
    fail_now(live, errors);
    return;
  }
  if (auto error = store_->start(record.id, static_cast<int64_t>(lines.size()), now_())) {
    fail_now(live, {BatchError{"storage_error", error->message, "", std::nullopt}});
    return;
  }
  record.status = BatchStatus::kInProgress;
  record.total = static_cast<int64_t>(lines.size());
  if (!open_journal(live)) return;
  planner_.add(record.id, store_->pending_items(record.id));
  spdlog::info("batch {}: in progress, {} requests for {}", record.id, record.total, record.endpoint);
}

// Stops feeding the batch and cancels its in-flight items; it finishes once they have ended.
void BatchActor::end(Live& live, Ending ending, std::string why) {
  if (live.ending != Ending::kNone) return;
  live.ending = ending;
  live.failure = std::move(why);
  planner_.stop(live.record.id);
  for (const auto& [index, handle] : live.handles) runner_->cancel(handle);
}

void BatchActor::feed() {
  if (!feeding_.load(std::memory_order_acquire)) return;
  // Busy: the engine has requests besides this actor's items (the count may lag by a step, and
  // items the engine has not admitted yet count as ours: an estimate that errs toward idle for
  // at most a tick).
  const bool busy = engine_requests_ && engine_requests_() > planner_.in_flight();
  const int32_t bound = busy ? config_.max_in_flight_busy : config_.max_in_flight;
  // At most max_in_flight_busy prompts start at once: on an idle engine their prefill is one
  // step, which a user arriving meanwhile waits for (the rest follow completions and ticks).
  std::weak_ptr<Actor<BatchMessage>> weak = weak_from_this();
  for (const ItemStart& start : planner_.take_starts(bound, config_.max_in_flight_busy)) {
    Live& live = live_.at(start.batch_id);
    const std::string batch_id = start.batch_id;
    const int64_t index = start.index;
    auto done = [weak, batch_id, index](ItemResult result) {
      if (auto self = std::static_pointer_cast<BatchActor>(weak.lock())) {
        actors::runtime::deliver(std::move(self), BatchMessage(ItemFinished{batch_id, index, std::move(result)}));
      }
    };
    live.handles[index] = runner_->start(live.record, index, live.lines.at(static_cast<size_t>(index)), done);
  }
}

// The group commit: each batch's new lines into its journals (fsync), then one transaction.
void BatchActor::flush() {
  for (auto& [id, live] : live_) {
    if (live.outcomes.empty()) continue;
    std::optional<StorageError> error = live.journal->append(live.output_lines, live.error_lines);
    if (!error) error = store_->commit(id, live.outcomes, live.journal->output_bytes(), live.journal->error_bytes());
    if (!error) {
      for (const ItemOutcome& outcome : live.outcomes) {
        (outcome.succeeded ? live.record.completed : live.record.failed) += 1;
        (outcome.succeeded ? items_succeeded_ : items_failed_).fetch_add(1, std::memory_order_relaxed);
      }
      live.record.output_bytes = live.journal->output_bytes();
      live.record.error_bytes = live.journal->error_bytes();
    } else {
      spdlog::error("batch {}: {}", id, error->message);
      end(live, Ending::kFail, error->message);
    }
    live.output_lines.clear();
    live.error_lines.clear();
    live.outcomes.clear();
  }
}

// Batches with nothing left in flight reach their end.
void BatchActor::finish_idle() {
  for (auto it = live_.begin(); it != live_.end();) {
    Live& live = it->second;
    const BatchStatus status = live.record.status;
    const bool past_validation = status == BatchStatus::kInProgress || status == BatchStatus::kCancelling ||
                                 status == BatchStatus::kFinalizing;
    const bool ready = past_validation && live.journal && planner_.idle(live.record.id) &&
                       live.outcomes.empty();
    if (is_terminal(status) || (ready && finish(live))) {
      planner_.remove(it->first);
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

// The batch's end: its journals become files, its status final. False when storage failed (the
// next tick tries again).
bool BatchActor::finish(Live& live) {
  BatchRecord& record = live.record;
  const int64_t now = now_();
  BatchStatus final_status = BatchStatus::kCompleted;
  std::optional<std::string> errors_json;
  if (live.ending == Ending::kCancel || (live.ending == Ending::kNone && record.status == BatchStatus::kCancelling)) {
    final_status = BatchStatus::kCancelled;
  } else if (live.ending == Ending::kExpire) {
    // The requests the window left unrun: one batch_expired line each, committed like answers.
    std::vector<ItemOutcome> outcomes;
    std::string lines;
    for (const int64_t index : store_->pending_items(record.id)) {
      auto checked = runner_->check_line(live.lines.at(static_cast<size_t>(index)), record.endpoint);
      const std::string custom_id = std::holds_alternative<std::string>(checked) ? std::get<std::string>(checked) : "";
      lines += runner_->expired_line(custom_id) + "\n";
      outcomes.push_back(ItemOutcome{index, false});
    }
    std::optional<StorageError> error = live.journal->append("", lines);
    if (!error) error = store_->commit(record.id, outcomes, live.journal->output_bytes(), live.journal->error_bytes());
    if (error) {
      spdlog::error("batch {}: {}", record.id, error->message);
      return false;
    }
    record.failed += static_cast<int64_t>(outcomes.size());
    items_failed_.fetch_add(static_cast<int64_t>(outcomes.size()), std::memory_order_relaxed);
    final_status = BatchStatus::kExpired;
  } else if (live.ending == Ending::kFail) {
    final_status = BatchStatus::kFailed;
    errors_json = runner_->errors_json({BatchError{"storage_error", live.failure, "", std::nullopt}});
    // Only what was committed becomes a file.
    auto reopened = BatchJournal::open(files_->dir(), record.id, record.output_bytes, record.error_bytes);
    if (auto* journal = std::get_if<BatchJournal>(&reopened)) live.journal.emplace(std::move(*journal));
  } else if (record.status != BatchStatus::kFinalizing) {
    if (auto error = store_->set_finalizing(record.id, now)) {
      spdlog::error("batch {}: {}", record.id, error->message);
      return false;
    }
  }
  auto final_file = [&](int64_t bytes, const std::filesystem::path& journal, std::string_view kind) {
    return bytes > 0 ? std::optional<FinalFile>(FinalFile{journal, fmt::format("{}_{}.jsonl", record.id, kind)})
                     : std::nullopt;
  };
  const auto output = final_file(live.journal->output_bytes(), live.journal->output_path(), "output");
  const auto errors = final_file(live.journal->error_bytes(), live.journal->error_path(), "error");
  if (auto error = store_->finish(record.id, final_status, now, output, errors, errors_json)) {
    spdlog::error("batch {}: {}", record.id, error->message);
    return false;
  }
  BatchJournal::remove(files_->dir(), record.id);
  spdlog::info("batch {}: {} ({} of {} answered, {} failed)", record.id, to_string(final_status),
               record.completed, record.total, record.failed);
  return true;
}

// Fails a batch at once (nothing of it ever ran, or its input is gone).
void BatchActor::fail_now(Live& live, const std::vector<BatchError>& errors) {
  BatchRecord& record = live.record;
  std::optional<FinalFile> output, error_file;
  if (live.journal) {
    if (live.journal->output_bytes() > 0) output = FinalFile{live.journal->output_path(), record.id + "_output.jsonl"};
    if (live.journal->error_bytes() > 0) error_file = FinalFile{live.journal->error_path(), record.id + "_error.jsonl"};
  }
  if (auto error = store_->finish(record.id, BatchStatus::kFailed, now_(), output, error_file,
                                  runner_->errors_json(errors))) {
    spdlog::error("batch {}: {}", record.id, error->message);
    return;  // still live in the store: the next tick tries again
  }
  BatchJournal::remove(files_->dir(), record.id);
  spdlog::info("batch {}: failed ({})", record.id, errors.empty() ? "" : errors.front().message);
  record.status = BatchStatus::kFailed;  // finish_idle() forgets it
}

void BatchActor::publish_stats() {
  items_in_flight_.store(planner_.in_flight(), std::memory_order_relaxed);
  items_queued_.store(planner_.queued(), std::memory_order_relaxed);
  live_batches_.store(static_cast<int64_t>(live_.size()), std::memory_order_relaxed);
}

}  // namespace troupe::batch

// `troupe admin`: argument parsing, a blocking line client on the Unix socket, and the text
// renderings of the replies. The socket protocol is net/admin_protocol.hpp's.
#include "app/admin_command.hpp"

#include <poll.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string_view>
#include <variant>

#include <fmt/format.h>
#include <sys/socket.h>

#include "net/admin_socket_file.hpp"
#include "net/json_writer.hpp"
#include "net/stats_schema.hpp"

namespace troupe::app {
namespace {

namespace dom = simdjson::dom;

struct AdminCliOptions {
  std::string socket_path;  // empty: net::default_admin_socket_path()
  bool json = false;
  bool all = false;         // stats: every figure of the stats schema, with its help
  std::string command;      // stats|watch|requests|cancel|drain|log-level|flush-prefix-cache
  std::string argument;     // cancel's id, log-level's level
  int64_t interval_ms = 1000;
  int64_t count = 0;        // watch: stop after this many updates (0: until interrupted)
};

struct CliUsageError {
  std::string message;
};

std::optional<int64_t> parse_positive(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9' || value > (int64_t{1} << 40)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

std::variant<AdminCliOptions, CliUsageError, bool> parse_args(std::vector<std::string> args) {
  if (!args.empty() && args.front() == "admin") args.erase(args.begin());
  AdminCliOptions options;
  std::vector<std::string> words;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    if (const size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    const auto take_value = [&]() -> std::optional<std::string> {
      if (value) return value;
      if (i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    if (flag == "--help" || flag == "-h") return true;
    if (flag == "--json") {
      options.json = true;
    } else if (flag == "--all") {
      options.all = true;
    } else if (flag == "--socket" || flag == "--interval" || flag == "--count") {
      const std::optional<std::string> text = take_value();
      if (!text) return CliUsageError{fmt::format("{} needs a value", flag)};
      if (flag == "--socket") {
        options.socket_path = *text;
        continue;
      }
      const std::optional<int64_t> number = parse_positive(*text);
      if (!number) return CliUsageError{fmt::format("{}: '{}' is not a number", flag, *text)};
      if (flag == "--interval") {
        if (*number < 50) return CliUsageError{"--interval: at least 50 ms"};
        options.interval_ms = *number;
      } else {
        options.count = *number;
      }
    } else if (flag.starts_with("-") && flag.size() > 1) {
      return CliUsageError{fmt::format("unknown option '{}'", args[i])};
    } else {
      words.push_back(args[i]);
    }
  }
  if (words.empty()) return CliUsageError{"which command? (stats, watch, requests, batches, cancel ID, drain, log-level L, flush-prefix-cache, reload, keys)"};
  options.command = words[0];
  const bool takes_argument = options.command == "cancel" || options.command == "log-level";
  const bool known = takes_argument || options.command == "stats" || options.command == "watch" ||
                     options.command == "requests" || options.command == "batches" ||
                     options.command == "drain" || options.command == "reload" || options.command == "keys" ||
                     options.command == "flush-prefix-cache";
  if (!known) return CliUsageError{fmt::format("unknown admin command '{}'", options.command)};
  if (takes_argument && words.size() != 2) {
    return CliUsageError{fmt::format("{} needs one argument ({})", options.command,
                                     options.command == "cancel" ? "a request id" : "a log level")};
  }
  if (!takes_argument && words.size() != 1) {
    return CliUsageError{fmt::format("{}: unexpected argument '{}'", options.command, words[1])};
  }
  if (takes_argument) options.argument = words[1];
  if (options.command == "cancel" && !parse_positive(options.argument)) {
    return CliUsageError{fmt::format("cancel: '{}' is not a request id (see 'troupe admin requests')",
                                     options.argument)};
  }
  return options;
}

std::string command_line_json(const AdminCliOptions& options) {
  net::JsonWriter json;
  json.begin_object();
  if (options.command == "watch") {
    json.field("cmd", "watch").field("interval_ms", options.interval_ms);
  } else if (options.command == "cancel") {
    json.field("cmd", "cancel").field("id", options.argument);
  } else if (options.command == "log-level") {
    json.field("cmd", "log_level").field("level", options.argument);
  } else if (options.command == "flush-prefix-cache") {
    json.field("cmd", "flush_prefix_cache");
  } else {
    json.field("cmd", options.command);
  }
  json.end_object();
  return json.take() + "\n";
}

// A blocking line reader on a connected socket.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool send_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      text.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next line; nullopt when the server closed the connection (or `timeout_ms` passed, if >= 0).
  std::optional<std::string> read_line(int timeout_ms) {
    while (true) {
      if (const size_t end = buffer_.find('\n'); end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return line;
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, timeout_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      char chunk[8192];
      const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

// ---- Rendering -----------------------------------------------------------------------------

double number(dom::element element, std::string_view path) {
  double value = 0;
  if (element.at_pointer(path).get(value) == simdjson::SUCCESS) return value;
  int64_t integer = 0;
  if (element.at_pointer(path).get(integer) == simdjson::SUCCESS) return static_cast<double>(integer);
  uint64_t unsigned_integer = 0;
  if (element.at_pointer(path).get(unsigned_integer) == simdjson::SUCCESS) {
    return static_cast<double>(unsigned_integer);
  }
  return 0;
}

std::string text(dom::element element, std::string_view path) {
  std::string_view value;
  return element.at_pointer(path).get(value) == simdjson::SUCCESS ? std::string(value) : std::string();
}

int64_t integer(dom::element element, std::string_view path) {
  return static_cast<int64_t>(number(element, path));
}

std::string format_duration_s(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds);
  if (total >= 3600) return fmt::format("{}h {:02}m {:02}s", total / 3600, total / 60 % 60, total % 60);
  if (total >= 60) return fmt::format("{}m {:02}s", total / 60, total % 60);
  return fmt::format("{:.1f}s", seconds);
}

std::string format_age_ms(double ms) {
  if (ms < 1000) return fmt::format("{:.0f}ms", ms);
  return format_duration_s(ms / 1000.0);
}

// `stats --all`: every figure the stats schema puts in the reply (net/stats_schema.hpp), in its
// order, with its help; a figure the server does not send (an older server) is shown as "-".
std::string every_stat(dom::element r) {
  std::string out;
  for (const net::Stat& stat : net::engine_stats_schema()) {
    if (stat.json.empty()) continue;
    std::string pointer = "/" + std::string(stat.json);
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    dom::element value;
    std::string shown = "-";
    if (r.at_pointer(pointer).get(value) == simdjson::SUCCESS) {
      if (value.is_string()) {
        shown = std::string(value.get_string().value_unsafe());
      } else if (value.is_bool()) {
        shown = value.get_bool().value_unsafe() ? "true" : "false";
      } else if (value.is_int64() || value.is_uint64()) {
        shown = fmt::format("{}", value.is_int64()
                                      ? value.get_int64().value_unsafe()
                                      : static_cast<int64_t>(value.get_uint64().value_unsafe()));
      } else if (value.is_double()) {
        shown = fmt::format("{:.4g}", value.get_double().value_unsafe());
      }
    }
    out += fmt::format("{:<36} {:>14}  {}\n", stat.json, shown, stat.help);
  }
  return out;
}

std::vector<std::string> stats_lines(dom::element r) {
  std::vector<std::string> lines;
  const auto row = [&](std::string_view label, std::string value) {
    lines.push_back(fmt::format("{:<10} {}", label, value));
  };
  row("model", fmt::format("{} (backend {}), up {}{}", text(r, "/model"), text(r, "/backend"),
                           format_duration_s(number(r, "/uptime_s")),
                           r.at_pointer("/draining").get_bool().value_unsafe() ? ", DRAINING" : ""));
  row("requests", fmt::format("{} running, {} waiting, {} preempted", integer(r, "/requests/running"),
                              integer(r, "/requests/waiting"), integer(r, "/requests/preempted")));
  row("kv blocks", fmt::format("{} used, {} cached, {} free of {} ({:.1f}% used)",
                               integer(r, "/kv_blocks/used"), integer(r, "/kv_blocks/cached"),
                               integer(r, "/kv_blocks/free"), integer(r, "/kv_blocks/total"),
                               100 * number(r, "/kv_blocks/usage_ratio")));
  row("prefix", fmt::format("{:.1f}% hit rate ({} of {} lookups)",
                            100 * number(r, "/prefix_cache/hit_rate"), integer(r, "/prefix_cache/hits"),
                            integer(r, "/prefix_cache/queries")));
  row("speed", fmt::format("{:.1f} tokens/s over the last 10 s", number(r, "/tokens_per_s")));
  row("latency", fmt::format("step p50 {:.1f} ms, p99 {:.1f} ms; ttft p50 {:.1f} ms, p99 {:.1f} ms",
                             number(r, "/step_time_ms/p50"), number(r, "/step_time_ms/p99"),
                             number(r, "/ttft_ms/p50"), number(r, "/ttft_ms/p99")));
  row("budget", fmt::format("max step {:.0f} ms; last step predicted {:.1f} ms, took {:.1f} ms "
                            "(mean error {:.0f}%, margin {:.0f}%); {} steps cut",
                            number(r, "/step_budget/max_step_ms"), number(r, "/step_budget/predicted_ms"),
                            number(r, "/step_budget/actual_ms"),
                            100 * number(r, "/step_budget/mean_abs_error_ratio"),
                            100 * number(r, "/step_budget/margin"),
                            integer(r, "/step_budget/budgeted_steps")));
  if (const double wall = number(r, "/step_account/wall_ms"); wall > 0) {
    // The step loop's wall time since start (issue 42), by part: where a served run went.
    const auto share = [&](std::string_view part) {
      return 100 * number(r, fmt::format("/step_account/{}_ms", part)) / wall;
    };
    row("time", fmt::format("idle {:.0f}%, engine {:.1f}%, layers {:.0f}% decode + {:.0f}% prompt, "
                            "logits {:.0f}%, sampling {:.1f}%, backend other {:.1f}% of {}",
                            share("idle"), share("engine"), share("decode_layers"),
                            share("prompt_layers"), share("logits"), share("sampling"),
                            share("backend_other"), format_duration_s(wall / 1000)));
  }
  row("fairness", fmt::format("{} clients waiting, {} fair-share preemptions",
                              integer(r, "/fairness/waiting_clients"),
                              integer(r, "/fairness/preemptions")));
  if (const int64_t drafts = integer(r, "/speculative/drafts"); drafts > 0) {
    row("drafts", fmt::format("{:.1f}% of {} draft tokens accepted ({} verify spans)",
                                   100 * number(r, "/speculative/acceptance_rate"),
                                   integer(r, "/speculative/draft_tokens"), drafts));
  }
  if (const std::string role = text(r, "/disagg/role"); !role.empty() && role != "combined") {
    row("disagg", fmt::format("{} ({}), {} peers, {} leases held, {} transfers in flight, {} ok, "
                              "{} failed, {} remote prefills, {} fallbacks",
                              role, text(r, "/disagg/transport"), integer(r, "/disagg/peers"),
                              integer(r, "/disagg/leases_held"), integer(r, "/disagg/transfers_in_flight"),
                              integer(r, "/disagg/transfers_ok"), integer(r, "/disagg/transfers_failed"),
                              integer(r, "/disagg/remote_prefills"), integer(r, "/disagg/fallbacks")));
  }
  row("totals", fmt::format("{} finished, {} refused, {} preemptions, {} prompt + {} generated tokens",
                            integer(r, "/totals/finished"), integer(r, "/totals/refused"),
                            integer(r, "/totals/preemptions"), integer(r, "/totals/prompt_tokens"),
                            integer(r, "/totals/generation_tokens")));
  return lines;
}

// The watch table: one header, one row per update.
constexpr std::string_view kWatchHeader =
    "   UPTIME  RUN WAIT PRMT  KV_USED KV_CACHED  KV_FREE  HIT%   TOK/S  STEP_P50 STEP_P99 "
    "TTFT_P50 TTFT_P99";

std::string watch_row(dom::element r) {
  return fmt::format("{:>9} {:>4} {:>4} {:>4} {:>8} {:>9} {:>8} {:>5.1f} {:>7.1f} {:>9.1f} {:>8.1f} "
                     "{:>8.1f} {:>8.1f}{}",
                     format_duration_s(number(r, "/uptime_s")), integer(r, "/requests/running"),
                     integer(r, "/requests/waiting"), integer(r, "/requests/preempted"),
                     integer(r, "/kv_blocks/used"), integer(r, "/kv_blocks/cached"),
                     integer(r, "/kv_blocks/free"), 100 * number(r, "/prefix_cache/hit_rate"),
                     number(r, "/tokens_per_s"), number(r, "/step_time_ms/p50"),
                     number(r, "/step_time_ms/p99"), number(r, "/ttft_ms/p50"),
                     number(r, "/ttft_ms/p99"),
                     r.at_pointer("/draining").get_bool().value_unsafe() ? "  draining" : "");
}

std::string requests_table(dom::element r) {
  dom::array list;
  if (r["requests"].get(list) != simdjson::SUCCESS || list.size() == 0) return "no live requests\n";
  std::vector<std::vector<std::string>> rows = {
      {"ID", "ORIGIN", "PHASE", "PRIORITY", "PROMPT", "GENERATED", "AGE", "CLIENT", "LABEL"}};
  for (dom::element item : list) {
    rows.push_back({std::to_string(integer(item, "/id")), text(item, "/origin"), text(item, "/phase"),
                    text(item, "/priority"), std::to_string(integer(item, "/prompt_tokens")),
                    std::to_string(integer(item, "/generated_tokens")),
                    format_age_ms(number(item, "/age_ms")), text(item, "/client"),
                    text(item, "/client_label")});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  // Numbers right-aligned, words left-aligned; the last column unpadded.
  const auto right_aligned = [](size_t column) { return column == 0 || (column >= 4 && column <= 6); };
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      if (c + 1 == row.size()) {
        line += row[c];
      } else if (right_aligned(c)) {
        line += fmt::format("{:>{}}", row[c], widths[c]);
      } else {
        line += fmt::format("{:<{}}", row[c], widths[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// `keys`: each API key's limits, what is left of them now, and its use since start.
std::string keys_table(dom::element r) {
  dom::array list;
  if (r["keys"].get(list) != simdjson::SUCCESS || list.size() == 0) return "no API keys\n";
  auto limit = [](int64_t per_minute, int64_t remaining, double reset_s) {
    return per_minute == 0 ? std::string("-")
                           : fmt::format("{}/{} (full in {:.0f}s)", remaining, per_minute, reset_s);
  };
  std::string out = fmt::format("{:<20} {:>24} {:>28} {:>9} {:>11} {:>8}\n", "KEY", "REQUESTS/MIN LEFT",
                                "TOKENS/MIN LEFT", "REQUESTS", "TOKENS", "REFUSED");
  for (dom::element k : list) {
    out += fmt::format("{:<20} {:>24} {:>28} {:>9} {:>11} {:>8}\n", text(k, "/name"),
                       limit(integer(k, "/rpm"), integer(k, "/remaining_requests"),
                             number(k, "/reset_requests_s")),
                       limit(integer(k, "/tpm"), integer(k, "/remaining_tokens"),
                             number(k, "/reset_tokens_s")),
                       integer(k, "/requests"), integer(k, "/tokens"), integer(k, "/refused"));
  }
  return out;
}

// `batches`: the actor's counters, then the newest batches of every owner.
std::string batches_table(dom::element r) {
  std::string out = fmt::format("batch items: {} in flight, {} queued; since start {} answered, {} failed; {} live batches\n",
                                integer(r, "/items/in_flight"), integer(r, "/items/queued"),
                                integer(r, "/items/succeeded"), integer(r, "/items/failed"),
                                integer(r, "/live_batches"));
  dom::array list;
  if (r["batches"].get(list) != simdjson::SUCCESS || list.size() == 0) return out + "no batches\n";
  std::vector<std::vector<std::string>> rows = {{"ID", "STATUS", "DONE", "TOTAL", "FAILED", "ENDPOINT", "OWNER"}};
  for (dom::element item : list) {
    rows.push_back({text(item, "/id"), text(item, "/status"), std::to_string(integer(item, "/completed")),
                    std::to_string(integer(item, "/total")), std::to_string(integer(item, "/failed")),
                    text(item, "/endpoint"), text(item, "/owner").empty() ? "-" : text(item, "/owner")});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const bool number = c >= 2 && c <= 4;
      line += c + 1 == row.size() ? row[c]
              : number            ? fmt::format("{:>{}}", row[c], widths[c])
                                  : fmt::format("{:<{}}", row[c], widths[c]);
    }
    out += line + "\n";
  }
  return out;
}

std::string render_reply(const AdminCliOptions& options, dom::element r) {
  const std::string& c = options.command;
  if (c == "stats") {
    std::string out;
    if (options.all) return every_stat(r);
    for (const std::string& line : stats_lines(r)) out += line + "\n";
    return out;
  }
  if (c == "requests") return requests_table(r);
  if (c == "batches") return batches_table(r);
  if (c == "keys") return keys_table(r);
  if (c == "cancel") {
    const bool was_live = r.at_pointer("/was_live").get_bool().value_unsafe();
    return was_live ? fmt::format("request {} cancelled\n", integer(r, "/id"))
                    : fmt::format("request {} is not live (nothing to cancel)\n", integer(r, "/id"));
  }
  if (c == "drain") {
    return "draining: the server stops admitting, finishes in-flight requests, then exits\n";
  }
  if (c == "log-level") {
    return fmt::format("log level {} (was {})\n", text(r, "/level"), text(r, "/previous"));
  }
  return fmt::format("prefix cache flushed: {} blocks freed\n", integer(r, "/blocks_freed"));
}

// Parses a reply line; nullopt (after a message) when it is not a JSON object.
std::optional<dom::element> parse_reply(dom::parser& parser, const std::string& line) {
  dom::element root;
  if (parser.parse(line).get(root) != simdjson::SUCCESS || !root.is_object()) {
    std::cerr << "troupe admin: the server sent something that is not a JSON reply: " << line << "\n";
    return std::nullopt;
  }
  return root;
}

// `reload`: one line per part (what is in force, or why the new version was refused); 0 when
// every part is in force, else 1.
int print_reload(dom::element root) {
  dom::array parts;
  if (root["reloaded"].get(parts) != simdjson::SUCCESS) {
    std::cerr << "troupe admin: server error: " << text(root, "/error") << "\n";
    return 1;
  }
  int status = 0;
  for (dom::element part : parts) {
    bool ok = false;
    if (part["ok"].get(ok) != simdjson::SUCCESS) ok = false;
    (ok ? std::cout : std::cerr) << fmt::format("{}: {}{}\n", text(part, "/what"),
                                                ok ? "" : "REFUSED: ", text(part, "/detail"));
    if (!ok) status = 1;
  }
  return status;
}

// 0 for {"ok":true}; 1 (after printing the error) otherwise.
int check_ok(dom::element root) {
  bool ok = false;
  if (root["ok"].get(ok) == simdjson::SUCCESS && ok) return 0;
  std::cerr << "troupe admin: server error: " << text(root, "/error") << "\n";
  return 1;
}

int run_watch(const AdminCliOptions& options, Connection& connection) {
  const bool in_place = !options.json && ::isatty(STDOUT_FILENO) == 1;
  dom::parser parser;
  int64_t num_updates = 0;
  int lines_drawn = 0;
  while (options.count == 0 || num_updates < options.count) {
    std::optional<std::string> line = connection.read_line(-1);
    if (!line) {
      std::cerr << "troupe admin: the server closed the connection\n";
      return num_updates > 0 ? 0 : 1;
    }
    ++num_updates;
    if (options.json) {
      std::cout << *line << std::endl;
      continue;
    }
    std::optional<dom::element> root = parse_reply(parser, *line);
    if (!root) return 1;
    if (const int status = check_ok(*root); status != 0) return status;
    if (!in_place) {
      if (num_updates == 1) std::cout << kWatchHeader << "\n";
      std::cout << watch_row(*root) << std::endl;
      continue;
    }
    // Redraw the block in place: cursor up over what was drawn, clear each line, rewrite.
    std::vector<std::string> block = stats_lines(*root);
    block.push_back(fmt::format("every {} ms; Ctrl-C to stop", options.interval_ms));
    std::string out;
    if (lines_drawn > 0) out += fmt::format("\x1b[{}A", lines_drawn);
    for (const std::string& text_line : block) out += "\r\x1b[2K" + text_line + "\n";
    lines_drawn = static_cast<int>(block.size());
    std::cout << out << std::flush;
  }
  return 0;
}

}  // namespace

int run_admin(const std::vector<std::string>& args) {
  auto parsed = parse_args(args);
  if (std::holds_alternative<bool>(parsed)) {
    std::cout << admin_usage_text();
    return 0;
  }
  if (const auto* error = std::get_if<CliUsageError>(&parsed)) {
    std::cerr << "troupe admin: " << error->message << " (try 'troupe admin --help')\n";
    return 2;
  }
  const AdminCliOptions& options = std::get<AdminCliOptions>(parsed);
  const std::filesystem::path path = options.socket_path.empty()
                                         ? net::default_admin_socket_path()
                                         : std::filesystem::path(options.socket_path);
  const int fd = net::connect_unix_socket(path);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT || error == ECONNREFUSED) {
      std::cerr << fmt::format("troupe admin: no troupe server is listening on {} ({}); start one "
                               "with 'troupe serve --admin-socket {}' or pass --socket PATH\n",
                               path.string(), error == ENOENT ? "no socket file" : "stale socket file",
                               path.string());
    } else {
      std::cerr << fmt::format("troupe admin: cannot connect to {}: {}\n", path.string(),
                               std::strerror(error));
    }
    return 1;
  }
  Connection connection(fd);
  if (!connection.send_all(command_line_json(options))) {
    std::cerr << "troupe admin: the server closed the connection\n";
    return 1;
  }
  if (options.command == "watch") return run_watch(options, connection);

  constexpr int kReplyTimeoutMs = 60'000;
  std::optional<std::string> line = connection.read_line(kReplyTimeoutMs);
  if (!line) {
    std::cerr << "troupe admin: no reply from the server on " << path.string() << "\n";
    return 1;
  }
  dom::parser parser;
  std::optional<dom::element> root = parse_reply(parser, *line);
  if (!root) return 1;
  if (options.json) {
    std::cout << *line << "\n";
    bool ok = false;
    return (*root)["ok"].get(ok) == simdjson::SUCCESS && ok ? 0 : 1;
  }
  if (options.command == "reload") return print_reload(*root);
  if (const int status = check_ok(*root); status != 0) return status;
  std::cout << render_reply(options, *root);
  return 0;
}

std::string admin_usage_text() {
  return R"(Usage: troupe admin [--socket PATH] [--json] COMMAND

Talks to a running 'troupe serve' over its admin socket.

Commands:
  stats [--all]           live snapshot: requests, KV blocks, prefix hits, speed, latency;
                          --all: every figure the server reports, with what it means
  watch [--interval MS]   a live table of the same, every MS ms (default 1000, at least 50);
        [--count N]       stop after N updates (default: until Ctrl-C)
  requests                every live request: id, origin, phase, priority, tokens, age
  batches                 durable batches (/v1/batches): the newest 20 and item progress
  cancel ID               cancel a request by its id (from 'requests')
  drain                   stop admitting, finish in-flight requests, then exit 0
  log-level L             trace, debug, info, warn, error, critical or off
  flush-prefix-cache      drop every cached, unreferenced prefix block
  keys                    every API key's limits, what is left of them, its use since start
  reload                  re-read the API keys file and the TLS certificate and key (as
                          SIGHUP does); a file that cannot be used is refused, the old stays

Options:
  --socket PATH           the admin socket (default: $TROUPE_ADMIN_SOCKET, else
                          $XDG_RUNTIME_DIR/troupe.sock, else /tmp/troupe-$UID/troupe.sock)
  --json                  print the server's JSON reply lines as they are

Exit codes: 0 ok, 1 server error or no server listening, 2 usage error.
)";
}

}  // namespace troupe::app

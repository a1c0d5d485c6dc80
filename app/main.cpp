// The troupe executable: parse the command line and dispatch.
#include <iostream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "app/admin_command.hpp"
#include "app/cli.hpp"
#include "app/generate.hpp"
#include "app/serve.hpp"
#include "app/version.hpp"

int main(int argc, char** argv) {
  using namespace troupe::app;
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = parse_command_line(args);
  if (auto* error = std::get_if<UsageError>(&parsed)) {
    std::cerr << "troupe: " << error->message << "\n";
    return 2;
  }
  return std::visit(
      [](auto& command) -> int {
        using T = std::decay_t<decltype(command)>;
        if constexpr (std::is_same_v<T, HelpCommand>) {
          std::cout << (command.topic == "serve"      ? serve_usage_text()
                        : command.topic == "generate" ? generate_usage_text()
                        : command.topic == "settings" ? settings_usage_text()
                                                      : usage_text());
          return 0;
        } else if constexpr (std::is_same_v<T, VersionCommand>) {
          std::cout << "troupe " << kVersionString << "\n";
          return 0;
        } else if constexpr (std::is_same_v<T, AdminCommand>) {
          return run_admin(command.args);
        } else if constexpr (std::is_same_v<T, GenerateCommand>) {
          return run_generate(command.options);
        } else {
          static_assert(std::is_same_v<T, ServeCommand>);
          return run_serve(command.options);
        }
      },
      std::get<Command>(parsed));
}

// deepinfer: the command-line entry point.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "apps/commands.h"
#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::apps {
std::map<std::string, CommandRegistrar>& CommandRegistry() {
  static std::map<std::string, CommandRegistrar> registry;
  return registry;
}
}  // namespace deepinfer::apps

int main(int argc, char** argv) {
  CLI::App app{"DeepInfer: a DeepSeek-V4 inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "deepinfer 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off (env DEEPINFER_LOG wins)")
      ->capture_default_str();
  app.parse_complete_callback([&] { deepinfer::InitLogging(log_level); });

  for (auto& [name, registrar] : deepinfer::apps::CommandRegistry()) registrar(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

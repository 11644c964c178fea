#include "apps/commands.h"

namespace deepinfer::apps {

void RegisterGenerate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate a completion");
  cmd->callback([] {});
}

}  // namespace deepinfer::apps

// Subcommands of the deepinfer CLI. Each Register* adds one subcommand to the app; the callbacks
// do flag parsing and wiring only (ARCHITECTURE.md §1: apps/).
#pragma once

#include <CLI/CLI.hpp>

namespace deepinfer::apps {

void RegisterGenerate(CLI::App& app);

}  // namespace deepinfer::apps

// Subcommands of the deepinfer CLI. Each cmd_*.cpp registers its subcommand with
// DEEPINFER_COMMAND(Function); main() adds them all in name order. Callbacks do flag parsing and
// wiring only (ARCHITECTURE.md §1: apps/).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>

namespace deepinfer::apps {

using CommandRegistrar = std::function<void(CLI::App&)>;

// name -> registrar. Filled by static initializers in the cmd_*.cpp files of this executable.
std::map<std::string, CommandRegistrar>& CommandRegistry();

struct CommandRegistration {
  CommandRegistration(const char* name, CommandRegistrar registrar) {
    CommandRegistry().emplace(name, std::move(registrar));
  }
};

}  // namespace deepinfer::apps

#define DEEPINFER_COMMAND(name, function) \
  static ::deepinfer::apps::CommandRegistration registration_##function(name, function)

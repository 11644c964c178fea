// Flags shared by the commands that run the engine (generate, chat, serve, bench), named like
// vLLM's where they mean the same, and the model directory positional argument.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine_core.h"

namespace deepinfer::apps {

struct EngineFlags {
  std::string model_dir;  // positional; empty: DefaultModelDir()
  EngineOptions options;
  bool sync = false;      // --sync: the synchronous loop
  bool no_prefix_cache = false;
  std::string device = "cpu";  // --device: cpu | cuda | cuda:N
};

// Adds [MODEL_DIR] and the engine flags to `cmd`.
void AddEngineFlags(CLI::App* cmd, EngineFlags& flags);
// Adds the numerics flags (--kv-fp8, --indexer-fp4, --attn-out-bf16, --attn-in-bf16, --head-in-bf16,
// --norm-out-bf16, --fp8-activations, --tensor-cores, --fold-fp4-experts, --fast-prefill, --state-rows) to `app`, bound
// to `numerics`: the engine's commands and `bench steps` take the same ones.
void AddNumericsFlags(CLI::App* app, Numerics& numerics);
// The EngineOptions the flags describe (model dir resolved).
EngineOptions ResolveEngineOptions(const EngineFlags& flags);

}  // namespace deepinfer::apps

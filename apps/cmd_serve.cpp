// deepinfer serve [MODEL_DIR] [--host H] [--port P] [--api-key K] [engine flags]
//
// Loads the model, starts the engine and serves the OpenAI- and Anthropic-compatible HTTP API
// (docs/server.md) until SIGTERM/SIGINT, which drains running requests (--drain-timeout) and
// exits. Binds 127.0.0.1 unless --host says otherwise.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "base/error.h"
#include "base/logging.h"
#include "recipe/encoding_rules.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::apps {
namespace {

struct ServeArgs {
  EngineFlags engine;
  server::ServerOptions server;
  double drain_timeout_s = 30;
  double keepalive_s = 15;
  int64_t max_body_mb = 8;
  std::vector<std::string> extra_names;
};

void RunServe(ServeArgs& args) {
  if (args.server.api_key.empty()) {
    if (const char* key = std::getenv("DEEPINFER_API_KEY"); key != nullptr) args.server.api_key = key;
  }
  EngineOptions options = ResolveEngineOptions(args.engine);
  const recipe::EncodingRules& rules = recipe::RulesForModelDir(options.model_dir);
  std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(options.model_dir + "/tokenizer.json");
  auto engine = std::make_unique<EngineCore>(options);

  args.server.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.drain_timeout_s * 1000));
  args.server.keepalive_interval = std::chrono::milliseconds(static_cast<int64_t>(args.keepalive_s * 1000));
  if (args.max_body_mb < 1) DI_THROW("--max-request-mb must be >= 1");
  args.server.max_body_bytes = static_cast<size_t>(args.max_body_mb) << 20;
  args.server.served_model_names.push_back(engine->info().model_name);
  for (const auto& name : args.extra_names) args.server.served_model_names.push_back(name);

  {
    server::Server server(args.server, *engine, *tokenizer, rules);
    server.Start();
    server.Wait();
  }
  engine.reset();
  DI_LOG_INFO("server stopped");
}

void RegisterServe(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI- and Anthropic-compatible HTTP API");
  AddEngineFlags(cmd, args->engine);
  auto* g = cmd->add_option_group("Server");
  g->add_option("--host", args->server.host, "address to bind (127.0.0.1: this machine only)")->capture_default_str();
  g->add_option("--port", args->server.port, "port (0: any free port)")->capture_default_str();
  g->add_option("--api-key", args->server.api_key,
                "require this key on /v1 routes (Authorization: Bearer or x-api-key); env DEEPINFER_API_KEY");
  g->add_option("--served-model-alias", args->extra_names, "more model names clients may use");
  g->add_option("--drain-timeout", args->drain_timeout_s, "seconds running requests get after SIGTERM")
      ->capture_default_str();
  g->add_option("--keepalive-interval", args->keepalive_s, "seconds of silence before an SSE keep-alive")
      ->capture_default_str();
  g->add_option("--max-request-mb", args->max_body_mb, "largest request body (MiB); larger gets 413")
      ->capture_default_str();
  g->add_option("--io-threads", args->server.io_threads, "HTTP threads")->capture_default_str();
  g->add_option("--max-waiting-requests", args->engine.options.max_waiting_requests,
                "requests the engine holds (running + waiting); more get 429")
      ->capture_default_str();
  cmd->callback([args] { RunServe(*args); });
}

DEEPINFER_COMMAND("serve", RegisterServe);

}  // namespace
}  // namespace deepinfer::apps

#include "model/model.h"

#include <filesystem>
#include <map>

#include "base/error.h"
#include "base/logging.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer {

namespace {

using Factory = std::function<std::unique_ptr<Model>(const ModelConfig&, WeightSource&, const LoadOptions&)>;

// Architecture string (config.json "architectures"[0]) -> factory. The only place that maps
// architectures to code.
const std::map<std::string, Factory>& Registry() {
  static const std::map<std::string, Factory> registry = {
      {"DeepseekV4ForCausalLM",
       [](const ModelConfig& c, WeightSource& src, const LoadOptions& o) -> std::unique_ptr<Model> {
         return std::make_unique<v4::V4Model>(c, v4::LoadWeights(c, src), o.numerics, o.device);
       }},
  };
  return registry;
}

std::string KnownArchitectures() {
  std::string s;
  for (const auto& [name, _] : Registry()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

LoadedModel LoadModel(const ModelConfig& config, const std::string& model_dir,
                      const LoadOptions& options) {
  std::string arch = config.architecture;
  if (arch.empty() && config.model_type == "deepseek_v4") arch = "DeepseekV4ForCausalLM";
  auto it = Registry().find(arch);
  if (it == Registry().end()) {
    DI_THROW("{}: architecture '{}' (model_type '{}') is not supported; supported: {}",
             config.source, arch, config.model_type, KnownArchitectures());
  }
  LoadedModel loaded;
  if (options.load_format == "dummy") {
    loaded.weights = std::make_unique<DummyWeightSource>(options.dummy_seed, config.n_routed_experts);
  } else if (options.load_format == "auto" || options.load_format == "safetensors") {
    loaded.weights = std::make_unique<CheckpointWeightSource>(Checkpoint::Open(model_dir));
  } else {
    DI_THROW("unknown load format '{}' (expected auto, safetensors or dummy)", options.load_format);
  }
  loaded.model = it->second(config, *loaded.weights, options);
  if (auto* ckpt = dynamic_cast<CheckpointWeightSource*>(loaded.weights.get())) {
    loaded.unused_tensors = v4::UnusedTensors(ckpt->checkpoint(), *ckpt);
    if (!loaded.unused_tensors.empty()) {
      DI_LOG_WARN("{}: {} tensors in the checkpoint are not used by the model (first: '{}')",
                  model_dir, loaded.unused_tensors.size(), loaded.unused_tensors.front());
    }
  }
  return loaded;
}

LoadedModel LoadModel(const std::string& model_dir, const LoadOptions& options) {
  const std::string config_path = (std::filesystem::path(model_dir) / "config.json").string();
  return LoadModel(LoadModelConfig(config_path), model_dir, options);
}

}  // namespace deepinfer

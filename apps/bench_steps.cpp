// deepinfer bench steps MODEL_DIR [--load-format dummy] [--batches 1,8,...] [--contexts 1024,...]
//                               [--prompts 1024,8192] [--json F]
//
// Issue 8's offline benchmark: on the GPU, the hardware ceilings measured first (device copy,
// cuBLASLt BF16 / FP8 GEMMs), then the decode step time at each (batch, context) and a prefill
// at each prompt length, each beside what it must read (memory floor: weights touched + state
// read over the measured copy bandwidth) and compute, and scaled to a 43-layer V4-Flash.
#include "apps/bench_steps.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/engine_flags.h"
#include "base/error.h"
#include "bench/ceilings.h"
#include "bench/step_bench.h"
#include "model/model.h"

namespace deepinfer::apps {
namespace {

struct StepsArgs {
  std::string model_dir;
  std::string load_format = "auto";
  int device_index = 0;
  bench::StepBenchOptions options;
  bool no_graphs = false;
  bool no_profile = false;
  bool no_ceilings = false;
  Numerics numerics;
  bool decode = true;
  bool prefill = true;
  std::vector<std::string> layer_mix{"0:2", "4:21", "128:20"};
  std::string json;
};

bench::LayerMix ParseMix(const std::vector<std::string>& items) {
  bench::LayerMix mix;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    DI_CHECK(colon != std::string::npos, "--layer-mix takes RATIO:COUNT items, got '{}'", item);
    mix[std::stoll(item.substr(0, colon))] = std::stoll(item.substr(colon + 1));
  }
  return mix;
}

std::string Ms(double seconds) { return seconds > 0 ? fmt::format("{:.3f}", 1e3 * seconds) : "-"; }

void PrintDecode(const std::vector<bench::StepPoint>& points, const bench::Rates& rates, const bench::LayerMix& mix) {
  std::printf("\ndecode (per step; busy: the profiled ops' device time; floor = (weights + state read) / copy\n"
              "bandwidth; /floor and GB/s use the better of eager and graph; x43: scaled to the layer mix;\n"
              "kernels: the graph's kernel launches per step / the most of them on one path, where its\n"
              "branches overlap (DEEPINFER_FORK_TOKENS))\n");
  std::printf("%8s %6s %10s %10s %10s %10s %7s %9s %9s %9s %11s %11s %10s %9s\n", "context", "batch", "eager ms",
              "graph ms", "busy ms", "floor ms", "/floor", "GB/s", "wts GB", "state GB", "x43 ms", "x43 floor",
              "x43 tok/s", "kernels");
  for (const bench::StepPoint& p : points) {
    if (!p.skipped.empty()) {
      std::printf("%8ld %6ld  skipped: %s\n", static_cast<long>(p.context), static_cast<long>(p.batch), p.skipped.c_str());
      continue;
    }
    const double best = p.best_seconds();
    const double floor = rates.copy_bytes_per_s > 0 ? p.cost.bytes() / rates.copy_bytes_per_s : 0;
    const bench::Extrapolation e = bench::Extrapolate(p, mix, rates);
    std::string kernels = "-";
    if (p.graph_kernels >= 0) {
      kernels = std::to_string(p.graph_kernels);
      if (p.graph_critical_kernels >= 0 && p.graph_critical_kernels < p.graph_kernels) {
        kernels += "/" + std::to_string(p.graph_critical_kernels);
      }
    }
    std::printf("%8ld %6ld %10s %10s %10s %10s %7s %9.0f %9.3f %9.3f %11s %11s %10s %9s\n",
                static_cast<long>(p.context), static_cast<long>(p.batch), Ms(p.eager_seconds).c_str(),
                Ms(p.graph_seconds).c_str(),
                Ms(p.busy_seconds).c_str(), Ms(floor).c_str(),
                floor > 0 ? fmt::format("{:.2f}", best / floor).c_str() : "-", p.cost.bytes() / best * 1e-9,
                p.cost.weight_bytes * 1e-9, p.cost.state_read_bytes * 1e-9, e.ok ? Ms(e.step_seconds).c_str() : "-",
                e.ok ? Ms(e.floor_seconds).c_str() : "-",
                e.ok ? fmt::format("{:.0f}", static_cast<double>(p.batch) / e.step_seconds).c_str() : "-",
                kernels.c_str());
  }
}

void PrintPrefill(const std::vector<bench::StepPoint>& points, const bench::Rates& rates) {
  std::printf("\nprefill (one sequence; linear = the profiled linear-layer ops, attention = attention, indexer,\n"
              "compressor and row lists; %% of the FP8 GEMM rate measured above)\n");
  std::printf("%8s %10s %10s %12s %12s %10s %12s\n", "prompt", "step ms", "tok/s", "linear ms", "linear TF/s",
              "% fp8", "attention ms");
  for (const bench::StepPoint& p : points) {
    if (!p.skipped.empty()) {
      std::printf("%8ld  skipped: %s\n", static_cast<long>(p.tokens_per_seq), p.skipped.c_str());
      continue;
    }
    double linear = 0, attention = 0;
    const nlohmann::json j = bench::ToJson(p, rates, nullptr);
    if (j.contains("profile_seconds")) {
      linear = j["profile_seconds"]["linear"].get<double>();
      attention = j["profile_seconds"]["attention"].get<double>();
    }
    const double tflops = linear > 0 ? p.cost.linear_flops / linear * 1e-12 : 0;
    std::printf("%8ld %10s %10.0f %12s %12.1f %10s %12s\n", static_cast<long>(p.tokens_per_seq),
                Ms(p.best_seconds()).c_str(), static_cast<double>(p.tokens_per_seq) / p.best_seconds(), Ms(linear).c_str(),
                tflops,
                rates.fp8_gemm_flops_per_s > 0 ? fmt::format("{:.1f}%", 100 * tflops * 1e12 / rates.fp8_gemm_flops_per_s).c_str()
                                               : "-",
                Ms(attention).c_str());
  }
}

void RunSteps(StepsArgs& a) {
  LoadOptions lo;
  lo.load_format = a.load_format;
  lo.device = DeviceId{DeviceType::kCuda, a.device_index};
  lo.numerics = a.numerics;
  a.options.cuda_graphs = !a.no_graphs;
  a.options.profile = !a.no_profile;
  const bench::LayerMix mix = ParseMix(a.layer_mix);
  nlohmann::json report;
  bench::Rates rates;
  if (!a.no_ceilings) {
    const bench::Ceilings c = bench::MeasureCeilings(a.device_index);
    rates.copy_bytes_per_s = c.copy.bytes_per_s;
    if (c.fp8_block.available) rates.fp8_gemm_flops_per_s = c.fp8_block.flops_per_s;
    if (c.bf16.available) rates.bf16_gemm_flops_per_s = c.bf16.flops_per_s;
    std::printf("ceilings: device copy %.0f GB/s (read + written), BF16 GEMM %.0f TFLOP/s, FP8 GEMM %.0f TFLOP/s "
                "(per-tensor scales), %.0f TFLOP/s (128x128 block scales)\n",
                c.copy.bytes_per_s * 1e-9, c.bf16.available ? c.bf16.flops_per_s * 1e-12 : 0.0,
                c.fp8.available ? c.fp8.flops_per_s * 1e-12 : 0.0,
                c.fp8_block.available ? c.fp8_block.flops_per_s * 1e-12 : 0.0);
    report["ceilings"] = bench::ToJson(c);
  }
  LoadedModel loaded = LoadModel(a.model_dir, lo);
  const Model& model = *loaded.model;
  report["model"] = {{"dir", a.model_dir},
                     {"layers", model.config().num_hidden_layers},
                     {"load_format", a.load_format},
                     {"tensor_core_linears", a.numerics.tensor_core_linears},
                     {"fp8_activations", a.numerics.fp8_activations},
                     {"kv_fp8", a.numerics.kv_fp8},
                     {"indexer_fp4", a.numerics.indexer_fp4},
                     {"bf16_attention_output", a.numerics.bf16_attention_output},
                     {"bf16_attention_inputs", a.numerics.bf16_attention_inputs},
                     {"bf16_head_input", a.numerics.bf16_head_input},
                     {"bf16_norm_outputs", a.numerics.bf16_norm_outputs},
                     {"fold_fp4_experts", a.numerics.fold_fp4_experts},
                     {"fast_prefill", a.numerics.fast_prefill},
                     {"state_rows", a.numerics.state_rows == StateRows::kF32    ? "f32"
                                    : a.numerics.state_rows == StateRows::kBf16 ? "bf16"
                                                                                : "fp8"}};
  report["layer_mix"] = nlohmann::json::object();
  for (const auto& [ratio, count] : mix) report["layer_mix"][std::to_string(ratio)] = count;
  if (a.decode) {
    const std::vector<bench::StepPoint> points = bench::RunDecodeBench(model, a.options);
    PrintDecode(points, rates, mix);
    for (const bench::StepPoint& p : points) report["decode"].push_back(bench::ToJson(p, rates, &mix));
  }
  if (a.prefill) {
    const std::vector<bench::StepPoint> points = bench::RunPrefillBench(model, a.options);
    PrintPrefill(points, rates);
    for (const bench::StepPoint& p : points) report["prefill"].push_back(bench::ToJson(p, rates, &mix));
  }
  if (!a.json.empty()) std::ofstream(a.json) << report.dump(2) << "\n";
}

}  // namespace

void AddStepBench(CLI::App* bench) {
  auto a = std::make_shared<StepsArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "steps", "GPU: ceilings, then decode step and prefill times beside their memory floor and FLOP rate");
  cmd->add_option("model_dir", a->model_dir, "model directory (config.json; weights unless --load-format dummy)")
      ->required();
  cmd->add_option("--load-format", a->load_format, "auto (safetensors) or dummy (random weights in the shipped formats)")
      ->capture_default_str();
  cmd->add_option("--device-index", a->device_index, "CUDA device")->capture_default_str();
  cmd->add_option("--batches", a->options.batches, "decode batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--contexts", a->options.contexts, "decode contexts (tokens already in each sequence's state)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prompts", a->options.prompts, "prefill prompt lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--iterations", a->options.decode_iterations, "timed decode steps per point")->capture_default_str();
  cmd->add_option("--prefill-iterations", a->options.prefill_iterations, "timed prefills per prompt length")
      ->capture_default_str();
  cmd->add_option("--layer-mix", a->layer_mix,
                  "layers by compress ratio to scale to (RATIO:COUNT, default DeepSeek-V4-Flash's 43)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--no-graphs", a->no_graphs, "decode eager only");
  cmd->add_flag("--no-profile", a->no_profile, "no per-op profile (and no x43 scaling)");
  cmd->add_flag("--no-ceilings", a->no_ceilings, "skip the ceilings (no floors or fractions)");
  AddNumericsFlags(cmd, a->numerics);
  cmd->add_flag("!--no-decode", a->decode, "skip the decode points");
  cmd->add_flag("!--no-prefill", a->prefill, "skip the prefill points");
  cmd->add_option("--json", a->json, "write the report as JSON (tools/plot_bench.py draws it)");
  cmd->callback([a] { RunSteps(*a); });
}

}  // namespace deepinfer::apps

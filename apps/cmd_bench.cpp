// deepinfer bench overlap [MODEL_DIR] [--requests N] [--prompt-len L] [--max-tokens T] [--json F]
// deepinfer bench ceilings [--device-index D] [--json F] [--prefill-tokens T]
// deepinfer bench read-patterns [--device-index D] [--iterations N] [--json F]
// deepinfer bench phases [--device-index D] [--iterations N] [--json F]
// deepinfer bench steps MODEL_DIR ... (apps/bench_steps.cpp)
//
// overlap: runs one synthetic workload through the engine twice, in the synchronous and in the
// overlapped loop, and reports for each where a step's wall time goes: the runner's busy time
// (copies, forward, sampling), the host's scheduling and bookkeeping, and the time the runner
// sat idle between consecutive steps waiting for the host (the "exposed" host time). The
// overlapped loop exists to drive the exposed fraction to zero.
//
// ceilings: the GPU's measured limits (bench/ceilings.h): a 2 GiB device-to-device copy and
// cuBLASLt GEMMs at 8192³ in BF16, FP8 with per-tensor scales and FP8 with block scales.
//
// read-patterns: the decode kernels' weight reads without their arithmetic (bench/read_patterns.h),
// row-major as they read now and tiled, beside a plain read and a device copy of the same run.
//
// phases: a batch-1 layer's longest path as a chain of phases (each a weight read, or none), run
// as a kernel a phase in a CUDA graph (with and without programmatic edges) and as one persistent
// kernel with grid-wide barriers (with and without L2 prefetches of the next phase): what each
// phase costs beyond its bytes (bench/phases.h).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/bench_steps.h"
#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "base/timer.h"
#include "bench/ceilings.h"
#include "bench/phases.h"
#include "bench/read_patterns.h"
#include "engine/engine_core.h"

namespace deepinfer::apps {
namespace {

struct BenchArgs {
  EngineFlags engine;
  int requests = 64;
  int prompt_len = 64;
  int max_tokens = 64;
  std::string json;
};

nlohmann::json RunMode(const BenchArgs& a, bool async) {
  EngineOptions o = ResolveEngineOptions(a.engine);
  o.async_scheduling = async;
  EngineCore engine(o);
  std::mt19937 rng(1);
  const int32_t vocab = static_cast<int32_t>(engine.info().vocab_size);
  std::vector<std::shared_ptr<RequestStream>> streams;
  Stopwatch clock;
  for (int i = 0; i < a.requests; ++i) {
    GenerationRequest r;
    for (int j = 0; j < a.prompt_len; ++j) r.prompt.push_back(2 + static_cast<TokenId>(rng() % (vocab - 2)));
    r.sampling.temperature = 0.f;
    r.sampling.max_tokens = a.max_tokens;
    r.sampling.ignore_eos = true;
    auto s = engine.Submit(std::move(r));
    if (!s.ok()) throw Error(s.status().ToString());
    streams.push_back(s.value());
  }
  int64_t tokens = 0;
  for (auto& s : streams) {
    bool done = false;
    while (!done) {
      s->WaitFor(std::chrono::milliseconds(100));
      for (const StreamEvent& e : s->Drain()) {
        for (const auto& d : e.deltas) tokens += static_cast<int64_t>(d.tokens.size());
        done |= e.done;
      }
    }
  }
  const double wall = clock.Seconds();
  engine.WaitIdle(std::chrono::seconds(60));
  const LoopTiming t = engine.timing();
  const double steps = static_cast<double>(std::max<int64_t>(t.steps, 1));
  nlohmann::json j;
  j["mode"] = async ? "overlapped" : "synchronous";
  j["steps"] = t.steps;
  j["wall_s"] = wall;
  j["output_tokens_per_s"] = static_cast<double>(tokens) / wall;
  j["step_ms"] = 1e3 * t.loop_seconds / steps;
  j["runner_busy_ms_per_step"] = 1e3 * t.runner_seconds / steps;
  j["host_ms_per_step"] = 1e3 * t.host_seconds / steps;
  j["runner_idle_ms_per_step"] = 1e3 * t.exposed_seconds / steps;
  j["host_fraction_of_step"] = t.host_seconds / std::max(t.loop_seconds, 1e-12);
  j["exposed_fraction_of_step"] = t.exposed_seconds / std::max(t.runner_seconds + t.exposed_seconds, 1e-12);
  if (t.device_busy_seconds > 0) {
    // On a GPU: the device's own timeline (events), busy per step and idle between steps.
    j["device_busy_ms_per_step"] = 1e3 * t.device_busy_seconds / steps;
    j["device_idle_ms_per_step"] = 1e3 * t.device_idle_seconds / steps;
    j["device_idle_fraction"] = t.device_idle_seconds / (t.device_busy_seconds + t.device_idle_seconds);
    if (t.decode_steps > 0) {
      j["decode_steps"] = t.decode_steps;
      j["decode_device_ms_per_step"] = 1e3 * t.decode_device_busy_seconds / static_cast<double>(t.decode_steps);
    }
  }
  return j;
}

void RunBench(const BenchArgs& a) {
  nlohmann::json report;
  report["workload"] = {{"requests", a.requests}, {"prompt_len", a.prompt_len}, {"max_tokens", a.max_tokens},
                        {"max_num_seqs", a.engine.options.max_num_seqs}};
  std::printf("%-12s %6s %9s %10s %10s %10s %9s %9s %9s %10s\n", "mode", "steps", "tok/s", "step ms", "runner ms",
              "host ms", "host/step", "exposed", "gpu idle", "decode ms");
  for (bool async : {false, true}) {
    const nlohmann::json m = RunMode(a, async);
    const std::string gpu_idle =
        m.contains("device_idle_fraction") ? fmt::format("{:.1f}%", 100 * m["device_idle_fraction"].get<double>()) : "-";
    const std::string decode_ms =
        m.contains("decode_device_ms_per_step") ? fmt::format("{:.3f}", m["decode_device_ms_per_step"].get<double>()) : "-";
    std::printf("%-12s %6ld %9.1f %10.3f %10.3f %10.3f %8.1f%% %8.1f%% %9s %10s\n", m["mode"].get<std::string>().c_str(),
                m["steps"].get<long>(), m["output_tokens_per_s"].get<double>(), m["step_ms"].get<double>(),
                m["runner_busy_ms_per_step"].get<double>(), m["host_ms_per_step"].get<double>(),
                100 * m["host_fraction_of_step"].get<double>(), 100 * m["exposed_fraction_of_step"].get<double>(),
                gpu_idle.c_str(), decode_ms.c_str());
    report["modes"].push_back(m);
  }
  std::printf("host/step: scheduling and bookkeeping time as a share of the step's wall time;\n"
              "exposed: the share of runner time spent idle between steps waiting for the host;\n"
              "gpu idle: on a GPU, the device's idle time between consecutive steps as a share of its\n"
              "busy + idle time, from events on its own timeline;\n"
              "decode ms: on a GPU, the device time of a decode-only step (every sequence one token).\n");
  if (!a.json.empty()) std::ofstream(a.json) << report.dump(2) << "\n";
}

struct CeilingsArgs {
  int device_index = 0;
  std::string json;
  int64_t prefill_tokens = 0;  // > 0: cuBLASLt block-scaled FP8 at the Flash prefill's shapes too
};

void PrintGemm(const char* name, const bench::GemmTiming& t) {
  if (!t.error.empty()) {
    std::printf("%-26s %s\n", name, t.error.c_str());
    return;
  }
  std::printf("%-26s %10.3f %10.1f %10.3f %10.3f\n", name, 1e3 * t.seconds_per_call, 1e-12 * t.flops_per_s,
              1e-12 * t.operand_bytes_per_s, t.check_ratio);
}

void RunCeilings(const CeilingsArgs& a) {
  const bench::Ceilings c = bench::MeasureCeilings(a.device_index);
  std::printf("%s\n%-26s %10s %10s %10s %10s\n", c.device.c_str(), "measurement", "ms", "TFLOP/s", "TB/s", "check");
  std::printf("%-26s %10.3f %10s %10.3f %10s\n", "device copy 2 GiB", 1e3 * c.copy.seconds, "-",
              1e-12 * c.copy.bytes_per_s, "ok");
  PrintGemm("gemm 8192^3 bf16", c.bf16);
  PrintGemm("gemm 8192^3 fp8 tensor", c.fp8);
  PrintGemm("gemm 8192^3 fp8 block", c.fp8_block);
  std::printf("TB/s: bytes read plus written (copy), each operand once (GEMM: act, W, out, scales);\n"
              "check: worst sampled output error over its tolerance (<= 1 passes).\n");
  for (const bench::GemmTiming* t : {&c.bf16, &c.fp8, &c.fp8_block}) {
    std::printf("%s: %s\n", std::string(bench::GemmKindName(t->kind)).c_str(), t->algo_note.c_str());
  }
  nlohmann::json report = bench::ToJson(c);
  if (a.prefill_tokens > 0) {
    // A routed expert's rows at this prefill: tokens · top-6 / 256 experts, on average.
    const int64_t expert_rows = std::max<int64_t>(1, a.prefill_tokens * 6 / 256);
    std::printf("cuBLASLt block-scaled FP8 at the Flash prefill's projections (%ld tokens, %ld rows an expert):\n",
                static_cast<long>(a.prefill_tokens), static_cast<long>(expert_rows));
    for (const bench::NamedGemmShape& s : bench::FlashPrefillGemmShapes(a.prefill_tokens, expert_rows)) {
      const bench::GemmTiming t = bench::TimeGemm(a.device_index, bench::GemmKind::kFp8BlockScaled, s.shape, 20);
      const std::string label = fmt::format("{} {}x{}x{}", s.name, s.shape.m, s.shape.n, s.shape.k);
      PrintGemm(label.c_str(), t);
      const bench::GemmTiming own = bench::TimeOwnFp8Linear(a.device_index, s.shape, 20);
      const bool both = t.error.empty() && own.error.empty();
      const std::string own_label =
          both ? fmt::format("  deepinfer ({:.2f}x)", own.seconds_per_call / t.seconds_per_call) : "  deepinfer";
      PrintGemm(own_label.c_str(), own);
      nlohmann::json j = bench::ToJson(t);
      j["name"] = s.name;
      j["deepinfer"] = bench::ToJson(own);
      report["prefill_shapes"].push_back(j);
    }
    std::printf("deepinfer: cuda::Linear (FP8 weights, kFp8Act with scratch; f32 x and y, so its TB/s counts\n"
                "4-byte x and y); (N.NNx): its time over cuBLASLt's at the shape.\n");
  }
  if (!a.json.empty()) std::ofstream(a.json) << report.dump(2) << "\n";
}

struct ReadPatternsArgs {
  int device_index = 0;
  int iterations = 10;
  std::string json;
};

void RunReadPatterns(const ReadPatternsArgs& a) {
  const bench::ReadPatternsReport r =
      bench::TimeReadPatterns(a.device_index, bench::StandardReadPatterns(), a.iterations);
  std::printf("%s\ndevice copy 1 GiB: %.3f TB/s (read + written); plain read: %.3f TB/s\n", r.device.c_str(),
              1e-12 * r.copy.bytes_per_s, 1e-12 * r.plain_read_bytes_per_s);
  std::printf("%-20s %8s %6s %5s %9s %8s %7s %7s %5s\n", "pattern", "MB", "grid", "b/SM", "ms", "TB/s", "/read",
              "/copy", "sums");
  for (const bench::ReadTiming& t : r.patterns) {
    std::printf("%-20s %8.1f %6ld %5d %9.4f %8.3f %6.1f%% %6.1f%% %5s\n", t.pattern.name.c_str(),
                1e-6 * static_cast<double>(t.pattern.Bytes()), static_cast<long>(t.grid), t.blocks_per_sm,
                1e3 * t.seconds, 1e-12 * t.bytes_per_s, 100 * t.bytes_per_s / r.plain_read_bytes_per_s,
                100 * t.bytes_per_s / r.copy.bytes_per_s, t.sums_agree ? "ok" : "DIFF");
  }
  std::printf("TB/s: the pattern's bytes read per second; /read, /copy: against the plain read and the copy\n"
              "(the decode floor's bandwidth); sums: its bytes' word sum equals the plain read's.\n");
  for (const bench::ReadTiming& t : r.patterns) {
    std::printf("%s: %s\n", t.pattern.name.c_str(), t.pattern.mimics.c_str());
  }
  std::printf("small reads (a launch each, back to back, each from DRAM):");
  for (const bench::SmallReadTiming& t : r.small_reads) {
    std::printf(" %ld MiB %.2f us %.2f TB/s;", static_cast<long>(t.bytes >> 20), 1e6 * t.seconds,
                1e-12 * t.bytes_per_s);
  }
  std::printf("\n");
  if (!a.json.empty()) std::ofstream(a.json) << bench::ToJson(r).dump(2) << "\n";
  for (const bench::ReadTiming& t : r.patterns) {
    if (!t.sums_agree) throw Error(fmt::format("read pattern {} did not read its bytes once each", t.pattern.name));
  }
}

struct PhasesArgs {
  int device_index = 0;
  int iterations = 20;
  std::string json;
};

void RunPhases(const PhasesArgs& a) {
  const bench::PhasesReport r =
      bench::TimePhases(a.device_index, bench::BatchOneLayerChain(), "batch_one_csa_layer", a.iterations);
  std::printf("%s\n%s: %ld phases, %.1f MB; plain read %.3f TB/s, floor %.2f us\n", r.device.c_str(), r.chain.c_str(),
              static_cast<long>(r.phases), 1e-6 * static_cast<double>(r.bytes), 1e-12 * r.plain_read_bytes_per_s,
              1e6 * r.floor_seconds);
  std::printf("%-22s %10s %10s %14s %6s %5s\n", "way", "us", "x floor", "us/phase over", "grid", "sums");
  for (const bench::PhasesTiming& t : r.ways) {
    std::printf("%-22s %10.2f %10.2f %14.2f %6ld %5s\n", t.way.c_str(), 1e6 * t.seconds,
                r.floor_seconds > 0 ? t.seconds / r.floor_seconds : 0.0, 1e6 * t.overhead_per_phase,
                static_cast<long>(t.grid), t.sums_agree ? "ok" : "DIFF");
  }
  std::printf("graph_pdl's programmatic edges: %ld\n", static_cast<long>(r.programmatic_edges));
  if (!a.json.empty()) std::ofstream(a.json) << bench::ToJson(r).dump(2) << "\n";
  for (const bench::PhasesTiming& t : r.ways) {
    if (!t.sums_agree) throw Error(fmt::format("phases: {} did not read the chain's bytes once each", t.way));
  }
}

void RegisterBench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto a = std::make_shared<BenchArgs>();
  CLI::App* overlap = bench->add_subcommand("overlap", "Step-time breakdown, synchronous vs overlapped loop");
  AddEngineFlags(overlap, a->engine);
  overlap->add_option("--requests", a->requests, "requests, all submitted at once")->capture_default_str();
  overlap->add_option("--prompt-len", a->prompt_len, "prompt tokens per request")->capture_default_str();
  overlap->add_option("--max-tokens", a->max_tokens, "output tokens per request")->capture_default_str();
  overlap->add_option("--json", a->json, "write the report as JSON");
  overlap->callback([a] { RunBench(*a); });
  auto c = std::make_shared<CeilingsArgs>();
  CLI::App* ceilings =
      bench->add_subcommand("ceilings", "GPU ceilings: device copy, cuBLASLt BF16 / FP8 / block-scaled FP8 GEMMs");
  ceilings->add_option("--device-index", c->device_index, "CUDA device")->capture_default_str();
  ceilings->add_option("--json", c->json, "write the report as JSON");
  ceilings->add_option("--prefill-tokens", c->prefill_tokens,
                       "also time the block-scaled FP8 GEMM at the Flash prefill's projection shapes for this many "
                       "tokens, cuBLASLt's beside DeepInfer's own (0: not)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  ceilings->callback([c] { RunCeilings(*c); });
  auto r = std::make_shared<ReadPatternsArgs>();
  CLI::App* reads = bench->add_subcommand(
      "read-patterns", "The decode kernels' weight reads without their arithmetic, row-major and tiled");
  reads->add_option("--device-index", r->device_index, "CUDA device")->capture_default_str();
  reads->add_option("--iterations", r->iterations, "timed passes per pattern")->capture_default_str()->check(
      CLI::Range(1, 1000));
  reads->add_option("--json", r->json, "write the report as JSON");
  reads->callback([r] { RunReadPatterns(*r); });
  auto ph = std::make_shared<PhasesArgs>();
  CLI::App* phases = bench->add_subcommand(
      "phases", "A batch-1 layer's chain of phases as graph kernels or one persistent kernel");
  phases->add_option("--device-index", ph->device_index, "CUDA device")->capture_default_str();
  phases->add_option("--iterations", ph->iterations, "timed passes per way")->capture_default_str()->check(
      CLI::Range(1, 10000));
  phases->add_option("--json", ph->json, "write the report as JSON");
  phases->callback([ph] { RunPhases(*ph); });
  AddStepBench(bench);
}

}  // namespace
DEEPINFER_COMMAND("bench", RegisterBench);
}  // namespace deepinfer::apps

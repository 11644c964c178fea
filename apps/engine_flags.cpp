#include "apps/engine_flags.h"

#include <map>
#include <string>

#include "apps/default_model.h"

namespace deepinfer::apps {

void AddEngineFlags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("model_dir", f.model_dir, "model directory (HF layout); default: the shipped demo model");
  auto* g = cmd->add_option_group("Engine");
  g->add_option("--max-num-seqs", f.options.max_num_seqs, "sequences running at once")->capture_default_str();
  g->add_option("--max-num-batched-tokens", f.options.max_num_batched_tokens, "tokens per step")->capture_default_str();
  g->add_option("--max-model-len", f.options.max_model_len,
                "prompt + completion tokens per sequence (0: the model's, at most 16384)")->capture_default_str();
  g->add_option("--block-size", f.options.block_size, "tokens per state-cache block")->capture_default_str();
  g->add_option("--num-cache-blocks", f.options.num_blocks, "state-cache blocks (0: from --cache-memory-mb)")->capture_default_str();
  g->add_option("--cache-memory-mb", f.options.cache_memory_mb, "state-cache memory when --num-cache-blocks is 0")->capture_default_str();
  g->add_flag("--no-enable-prefix-caching", f.no_prefix_cache, "disable the prefix cache");
  g->add_option("--pack-interval-blocks", f.options.pack_interval_blocks,
                "keep a resume pack every K blocks of a long prompt (0: prompt ends only)")->capture_default_str();
  g->add_flag("--sync", f.sync, "synchronous step loop (no CPU/compute overlap)");
  g->add_option("--load-format", f.options.load.load_format, "auto | safetensors | dummy")->capture_default_str();
  g->add_option("--dummy-seed", f.options.load.dummy_seed, "seed of the dummy weights")->capture_default_str();
  AddNumericsFlags(g, f.options.load.numerics);
  g->add_option("--device", f.device, "where the model runs: cpu | cuda | cuda:N")
      ->capture_default_str()
      ->check([](const std::string& v) {
        return v == "cpu" || v == "cuda" || v.rfind("cuda:", 0) == 0 ? std::string() : "expected cpu, cuda or cuda:N";
      });
  g->add_flag("--cuda-graphs", f.options.cuda_graphs, "CUDA: run decode steps as CUDA graphs (one per batch bucket)");
  g->add_option("--served-model-name", f.options.served_model_name, "model name reported by the API");
}

void AddNumericsFlags(CLI::App* app, Numerics& n) {
  app->add_flag("--kv-fp8", n.kv_fp8,
                "KV rows as the reference stores them: nope channels through FP8, rope channels through BF16 (with "
                "--tensor-cores, sparse attention on split-BF16 tensor cores)");
  app->add_flag("--indexer-fp4", n.indexer_fp4, "the indexer's queries and keys through FP4 (the reference's QAT)");
  app->add_flag("--attn-out-bf16", n.bf16_attention_output,
                "round the attention output to BF16 ahead of wo_a, as the reference's BF16 einsum takes it (with "
                "--tensor-cores, wo_a on one BF16 part instead of three)");
  app->add_flag("--attn-in-bf16", n.bf16_attention_inputs,
                "round q and the attention's probabilities to BF16, as the reference's attention kernel takes them "
                "(with --kv-fp8 --tensor-cores, one BF16 MMA per step of the scores and of the weighted sums instead "
                "of three)");
  app->add_flag("--head-in-bf16", n.bf16_head_input,
                "round the head's input (the final norm's output) to BF16, as the reference's norm returns it (with "
                "--tensor-cores, the head on one BF16 part instead of three)");
  app->add_flag("--norm-out-bf16", n.bf16_norm_outputs,
                "round the blocks' attn_norm and ffn_norm outputs to BF16, as the reference's norm returns them "
                "(with --tensor-cores, their BF16 products on one part instead of three where the warp-specialized "
                "kernels run them)");
  app->add_flag("--fp8-activations", n.fp8_activations,
                "round the inputs of the FP8/FP4 linears through FP8 per 128 (the reference's act_quant)");
  app->add_flag("--tensor-cores", n.tensor_core_linears,
                "CUDA: BF16/FP8/FP4 linears on tensor cores (exact f32 products from 3 BF16 parts of each "
                "activation; with --fp8-activations, e4m3 MMAs for the linears the reference quantizes, warpgroup "
                "MMAs on sm_90a)");
  app->add_flag("--fold-fp4-experts", n.fold_fp4_experts,
                "CUDA with --tensor-cores --fp8-activations on sm_90a: keep the routed FP4 experts folded into e4m3 "
                "codes for the whole run (about twice their bytes of device memory; the same outputs), so that no "
                "step converts their nibbles");
  app->add_flag("--fast-prefill", n.fast_prefill,
                "CUDA with --tensor-cores --fp8-activations: the prefill's big products on faster kernels that sum in "
                "another order than decode's (FP8 linears of 512+ rows and wo_a's BF16 products on cuBLASLt, the "
                "routed FP4 experts on BF16 MMAs): each output within the f32 sum's order bound, but a sequence's "
                "bits then depend on how its prompt is batched and chunked (docs/numerics.md)");
  app->add_option_function<std::string>(
         "--state-rows",
         [&n](const std::string& v) {
           const std::map<std::string, StateRows> names{
               {"f32", StateRows::kF32}, {"bf16", StateRows::kBf16}, {"fp8", StateRows::kFp8}};
           const auto it = names.find(v);
           if (it == names.end()) {
             throw CLI::ValidationError("--state-rows", "expected f32, bf16 or fp8, got '" + v + "'");
           }
           n.state_rows = it->second;
         },
         "with --kv-fp8, how the state stores its attention rows: f32 (2,048 bytes a V4 row), bf16 "
         "(1,024) or fp8 (the packed rows of dsv4-model.md 6.2, 584 bytes at a 592-byte pitch: the most "
         "context per GPU); the same outputs. Without --kv-fp8 the rows are f32")
      ->type_name("f32|bf16|fp8")
      ->default_str("fp8");
}

EngineOptions ResolveEngineOptions(const EngineFlags& f) {
  EngineOptions o = f.options;
  o.model_dir = f.model_dir.empty() ? DefaultModelDir() : f.model_dir;
  o.async_scheduling = !f.sync;
  o.enable_prefix_caching = !f.no_prefix_cache;
  if (f.device != "cpu") {
    o.load.device.type = DeviceType::kCuda;
    o.load.device.index = f.device.size() > 5 ? std::stoi(f.device.substr(5)) : 0;
  }
  return o;
}

}  // namespace deepinfer::apps

// The phase chains' host side: the batch-1 layer chain, its rules and the JSON report.
#include "bench/phases.h"

#include "base/error.h"

namespace deepinfer::bench {

std::vector<Phase> BatchOneLayerChain() {
  constexpr int64_t kMiB = int64_t{1} << 20;
  // Bytes from Flash's shapes (D = 4096, q_lora 1024, 64 heads × 512, o_lora 1024 in 8 groups,
  // experts of 2048, FP8 and FP4 with their scales rounded to whole 256 bytes; the state rows of an
  // 8k CSA layer: 2048 compressed and 128 window rows of 584 bytes, the index keys at FP4).
  auto mib = [&](double m) { return static_cast<int64_t>(m * kMiB) / 256 * 256; };
  return {
      {"hc_pre", mib(1.5)},          {"attn_norm", 0},          {"wq_a", mib(4.0)},
      {"q_norm", 0},                 {"wq_b", mib(32.0)},       {"q_rope", 0},
      {"index_wq_b", mib(8.0)},      {"index_scores", mib(0.6)}, {"index_top_k", 0},
      {"attention", mib(1.3)},       {"o_inverse_rope", 0},     {"wo_a", mib(32.0)},
      {"wo_b", mib(32.0)},           {"hc_post", 0},            {"hc_pre_ffn", mib(1.5)},
      {"ffn_norm", 0},               {"router", mib(2.0)},      {"top_k", 0},
      {"moe_align", 0},              {"experts_w13", mib(6 * 8.5)}, {"swiglu", 0},
      {"experts_w2", mib(6 * 4.25)}, {"moe_combine", 0},        {"hc_post_ffn", 0},
  };
}

void ValidateChain(const std::vector<Phase>& chain) {
  DI_CHECK(!chain.empty(), "a phase chain needs at least one phase");
  for (const Phase& p : chain) {
    DI_CHECK(p.bytes >= 0 && p.bytes % 256 == 0, "phase {}: {} bytes (a multiple of 256, or 0)", p.name, p.bytes);
  }
}

int64_t ChainBytes(const std::vector<Phase>& chain) {
  int64_t bytes = 0;
  for (const Phase& p : chain) bytes += p.bytes;
  return bytes;
}

nlohmann::json ToJson(const PhasesReport& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["chain"] = r.chain;
  j["phases"] = r.phases;
  j["bytes"] = r.bytes;
  j["plain_read_bytes_per_s"] = r.plain_read_bytes_per_s;
  j["floor_seconds"] = r.floor_seconds;
  j["programmatic_edges"] = r.programmatic_edges;
  for (const PhasesTiming& t : r.ways) {
    j["ways"].push_back({{"way", t.way},
                         {"seconds", t.seconds},
                         {"overhead_per_phase", t.overhead_per_phase},
                         {"sums_agree", t.sums_agree},
                         {"grid", t.grid}});
  }
  return j;
}

}  // namespace deepinfer::bench

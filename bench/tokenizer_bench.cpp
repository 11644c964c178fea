// tokenizer_bench --tokenizer FILE --corpus FILE [--passes N]
//
// Single-threaded encode throughput of deepinfer::Tokenizer: each pass encodes every line of the
// corpus (split on '\n') with one Encode call, as `deepinfer tokenize` does, on one thread. The
// first pass starts with an empty word cache. Prints one JSON object:
//   {"bytes": B, "lines": L, "ids": I, "load_s": S, "pass_s": [wall s per pass],
//    "pass_cpu_s": [thread CPU s per pass], "first_mb_s": B/s1/1e6, "best_mb_s": B/min(s)/1e6}
// CPU time (CLOCK_THREAD_CPUTIME_ID) is the figure to trust on a shared, loaded machine.
// bench/tokenizer_bench.py runs it beside the Hugging Face library on the same corpus.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

int Usage() {
  std::fprintf(stderr, "usage: tokenizer_bench --tokenizer FILE --corpus FILE [--passes N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  std::string corpus_path;
  int passes = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--tokenizer") {
      tokenizer_path = argv[i + 1];
    } else if (flag == "--corpus") {
      corpus_path = argv[i + 1];
    } else if (flag == "--passes") {
      passes = std::max(1, std::atoi(argv[i + 1]));
    } else {
      return Usage();
    }
  }
  if (tokenizer_path.empty() || corpus_path.empty()) return Usage();

  std::ifstream in(corpus_path, std::ios::binary);
  const std::string corpus{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string_view> lines;
  for (std::string_view rest = corpus; !rest.empty();) {
    const size_t newline = rest.find('\n');
    lines.push_back(rest.substr(0, newline));
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
  }
  size_t num_bytes = 0;
  for (std::string_view line : lines) num_bytes += line.size();

  try {
    const auto load_start = std::chrono::steady_clock::now();
    const auto tokenizer = deepinfer::Tokenizer::FromFile(tokenizer_path);
    const double load_s = Seconds(load_start);
    std::vector<double> pass_s;
    std::vector<double> pass_cpu_s;
    size_t num_ids = 0;
    for (int pass = 0; pass < passes; ++pass) {
      num_ids = 0;
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = ThreadCpuSeconds();
      for (std::string_view line : lines) num_ids += tokenizer->Encode(line).size();
      pass_cpu_s.push_back(ThreadCpuSeconds() - cpu_start);
      pass_s.push_back(Seconds(start));
    }
    const double best = *std::min_element(pass_s.begin(), pass_s.end());
    std::printf("{\"bytes\": %zu, \"lines\": %zu, \"ids\": %zu, \"load_s\": %.4f, \"pass_s\": [%s], "
                "\"pass_cpu_s\": [%s], \"first_mb_s\": %.3f, \"best_mb_s\": %.3f}\n",
                num_bytes, lines.size(), num_ids, load_s,
                fmt::format("{:.4f}", fmt::join(pass_s, ", ")).c_str(),
                fmt::format("{:.4f}", fmt::join(pass_cpu_s, ", ")).c_str(),
                num_bytes / pass_s.front() / 1e6, num_bytes / best / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

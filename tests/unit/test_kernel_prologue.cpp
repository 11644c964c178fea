// Every CUDA kernel of the project (src/kernels/cuda, bench) starts with PdlPrologue()
// (kernels/cuda/cuda_common.cuh): CUDA graphs make kernel-to-kernel edges programmatic
// (CudaGraph::EndCapture), so a kernel that read its predecessor's output before that call would
// race with it. PdlPrologue(L2Range) (an L2 prefetch of constant bytes, then the same call)
// counts as the call. This scans the kernel sources
// (no GPU needed) and names any __global__ function whose body does not begin with the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The __global__ definitions of `text` (signatures hold no braces) whose body does not open with
// PdlPrologue() or PdlPrologue(L2Range), each as "name:line"; declarations and comment lines
// are passed over.
std::vector<std::string> KernelsWithoutPrologue(const std::string& text, const std::string& name) {
  std::vector<std::string> missing;
  for (size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
    const size_t line_start = text.rfind('\n', at) + 1;  // npos + 1 == 0 on the first line
    const std::string before = text.substr(line_start, at - line_start);
    const size_t first = before.find_first_not_of(' ');
    if (first != std::string::npos && before.compare(first, 2, "//") == 0) continue;  // a comment
    int depth = 0;
    size_t i = at;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '(') ++depth;
      if (c == ')') --depth;
      if (depth == 0 && (c == '{' || c == ';')) break;
    }
    if (i >= text.size() || text[i] == ';') continue;  // a declaration
    const size_t body = text.find_first_not_of(" \n", i + 1);
    if (text.compare(body, 12, "PdlPrologue(") != 0) {
      const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
      missing.push_back(name + ":" + std::to_string(line));
    }
  }
  return missing;
}

TEST(KernelSources, EveryKernelBeginsWithPdlPrologue) {
  int kernels = 0;
  std::vector<std::string> missing;
  for (const char* folder : {"src/kernels/cuda", "bench"}) {  // the benchmarks' kernels run in graphs too
    const std::filesystem::path dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / folder;
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cu" && ext != ".cuh") continue;
      const std::string text = Read(entry.path());
      for (size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
        ++kernels;
      }
      for (const std::string& m : KernelsWithoutPrologue(text, entry.path().filename().string())) missing.push_back(m);
    }
  }
  EXPECT_GT(kernels, 50) << "the kernel sources moved?";
  std::string list;
  for (const std::string& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << "kernels without PdlPrologue():" << list;
}

TEST(KernelSources, TheScanFindsAMissingPrologue) {
  const std::string text =
      "__global__ void A(int* x) {\n  PdlPrologue();\n  x[0] = 1;\n}\n"
      "template <int N>\n__global__ void __launch_bounds__(128, 2) B(const int* x, int* y) {\n  y[0] = x[0];\n}\n"
      "__global__ void C(int* x);\n"
      "__global__ void E(const int* w, int* x) {\n  PdlPrologue(L2Range{w, 64});\n  x[0] = w[0];\n}\n"
      "// __global__ void D() { }\n";
  const std::vector<std::string> missing = KernelsWithoutPrologue(text, "t.cu");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0], "t.cu:6");
}

}  // namespace

// bench/kernel_trace.h's file format (what tools/kernel_trace.py reads), and the CPU build's
// refusal to trace.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/kernel_trace.h"

namespace deepinfer::bench {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(KernelTrace, AppendsEachTraceWithTimesFromItsEarliestStart) {
  const std::string path = ::testing::TempDir() + "kernel_trace_format.txt";
  std::remove(path.c_str());
  TracedKernel a, b;
  a.name = "void Foo<1>(float const*)";
  a.start_ns = 1000500, a.end_ns = 1003000, a.stream = 7;
  a.grid[0] = 4, a.grid[1] = 1, a.grid[2] = 8, a.block[0] = 256, a.block[1] = 1, a.block[2] = 1;
  b.name = "Bar";
  b.start_ns = 1000000, b.end_ns = 1000900, b.stream = 9;
  b.grid[0] = b.grid[1] = b.grid[2] = 1, b.block[0] = 64, b.block[1] = b.block[2] = 1;
  AppendKernelTrace(path, "decode batch 1 replay 0", {a, b});
  AppendKernelTrace(path, "decode batch 1 replay 1", {});
  EXPECT_EQ(ReadAll(path),
            "trace decode batch 1 replay 0\n"
            "500\t3000\t7\t4,1,8\t256,1,1\tvoid Foo<1>(float const*)\n"
            "0\t900\t9\t1,1,1\t64,1,1\tBar\n"
            "end\n"
            "trace decode batch 1 replay 1\n"
            "end\n");
  std::remove(path.c_str());
}

TEST(KernelTrace, AppendingToAFolderThatIsNotThereNamesThePath) {
  try {
    AppendKernelTrace("/nonexistent-folder/trace.txt", "x", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/trace.txt"), std::string::npos) << e.what();
  }
}

#if !DEEPINFER_HAS_CUDA
TEST(KernelTrace, TheCpuBuildRefusesToTrace) {
  try {
    KernelTrace::Start();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA build"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace deepinfer::bench

// `deepinfer render` (flags kept stable for other checks): the request-case bodies render to
// exactly the expected prompt with nothing appended; rules come from --model DIR/config.json;
// a bad request exits 1 with the field named on stderr.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "recipe_test_util.h"

namespace deepinfer::recipe {
namespace {

struct RunResult {
  std::string out;
  int exit_code = -1;
};

RunResult RunRender(const std::string& args, const std::string& stdin_text) {
  // Per process: CTest runs the cases of this binary in parallel processes.
  const auto dir = std::filesystem::temp_directory_path() / ("deepinfer_render_cli_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto input = dir / "body.json";
  std::ofstream(input, std::ios::binary) << stdin_text;
  const std::string command = std::string(DEEPINFER_BINARY_DIR) + "/deepinfer render " + args +
                              " < " + input.string() + " 2>&1";
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// A model directory whose config.json selects `rules`.
std::string ModelDirFor(const std::string& rules) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("deepinfer_render_cli_" + rules + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "deepseek_v4", "chat_encoding": ")"
                                      << rules << "\"}";
  return dir.string();
}

TEST(RenderCli, RequestCasesRenderExactly) {
  for (const auto& file : testing::JsonFiles("request-cases")) {
    SCOPED_TRACE(file);
    const OrderedJson spec = testing::ReadJson(file);
    const RunResult run = RunRender("--model " + ModelDirFor(spec.value("rules", "deepseek-v4")),
                                    spec["body"].dump());
    EXPECT_EQ(run.exit_code, 0) << run.out;
    EXPECT_EQ(run.out, testing::ReadFile(testing::WithoutExtension(file) + ".txt"));
  }
}

TEST(RenderCli, BadRequestExitsOne) {
  const RunResult run = RunRender("--model " + ModelDirFor("deepseek-v4"),
                                  R"({"messages": [{"role": "user", "content": 3}]})");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, "error: messages[0].content: expected a string or an array of content parts, "
                     "got integer\n");
}

}  // namespace
}  // namespace deepinfer::recipe

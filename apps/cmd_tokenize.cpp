// deepinfer tokenize --tokenizer FILE
//
// Reads text on stdin and, for each input line (split on '\n', the newline not included; a final
// '\n' ends the last line rather than starting an empty one), writes the line's token ids as one
// JSON array on its own output line. No special tokens are added; special-token strings inside
// the text are recognised. Bytes that are not valid UTF-8 are encoded as U+FFFD (tokenizer.h).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

#include "apps/commands.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::apps {
namespace {

void RunTokenize(const std::string& tokenizer_path) {
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(tokenizer_path);
  const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  fmt::memory_buffer out;
  std::string_view rest = input;
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    out.push_back('[');
    bool first = true;
    for (int32_t id : tokenizer->Encode(line)) {
      if (!first) out.push_back(',');
      fmt::format_to(std::back_inserter(out), "{}", id);
      first = false;
    }
    out.push_back(']');
    out.push_back('\n');
    if (out.size() > (size_t{1} << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

void RegisterTokenize(CLI::App& app) {
  auto tokenizer_path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Tokenize stdin: one JSON array of token ids per input line (no special tokens "
                  "added)");
  cmd->add_option("--tokenizer", *tokenizer_path, "path of a Hugging Face tokenizer.json")
      ->required();
  cmd->callback([tokenizer_path] { RunTokenize(*tokenizer_path); });
}

DEEPINFER_COMMAND("tokenize", RegisterTokenize);

}  // namespace
}  // namespace deepinfer::apps

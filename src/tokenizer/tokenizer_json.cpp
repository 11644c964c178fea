// tokenizer.json loading: validates the supported subset (tokenizer.h) and builds the components.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/logging.h"
#include "tokenizer/tokenizer_impl.h"

namespace deepinfer::tokenizer_internal {
namespace {

using Json = nlohmann::json;

// Reads typed values, throwing errors that name the file and the JSON path of the bad key.
class Reader {
 public:
  explicit Reader(const std::string& origin) : origin_(origin) {}

  [[noreturn]] void Fail(const std::string& path, const std::string& what) const {
    DI_THROW("tokenizer.json '{}': {}: {}", origin_, path, what);
  }

  const Json& Require(const Json& object, const char* key, const std::string& path) const {
    auto it = object.find(key);
    if (it == object.end()) Fail(path, fmt::format("missing key '{}'", key));
    return *it;
  }

  // The value of `key`, or nullptr when absent or null.
  static const Json* Optional(const Json& object, const char* key) {
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }

  void ExpectObject(const Json& value, const std::string& path) const {
    if (!value.is_object()) Fail(path, fmt::format("expected an object, got {}", value.type_name()));
  }

  std::string String(const Json& value, const std::string& path) const {
    if (!value.is_string()) Fail(path, fmt::format("expected a string, got {}", value.type_name()));
    return value.get<std::string>();
  }

  bool Bool(const Json& object, const char* key, bool fallback, const std::string& path) const {
    const Json* value = Optional(object, key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) Fail(path + "." + key, "expected true or false");
    return value->get<bool>();
  }

  int32_t Id(const Json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      Fail(path, fmt::format("expected a token id (integer in [0, 2^31)), got {}", value.dump()));
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }

  const std::string& origin() const { return origin_; }

  std::string Type(const Json& value, const std::string& path) const {
    ExpectObject(value, path);
    return String(Require(value, "type", path), path + ".type");
  }

 private:
  const std::string& origin_;
};

void CheckNormalizer(const Reader& r, const Json& normalizer, const std::string& path) {
  const std::string type = r.Type(normalizer, path);
  if (type != "Sequence") {
    r.Fail(path + ".type", fmt::format("normalizer type '{}' is not supported (supported: none, "
                                       "or a Sequence of none)", type));
  }
  const Json& list = r.Require(normalizer, "normalizers", path);
  if (!list.is_array()) r.Fail(path + ".normalizers", "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    CheckNormalizer(r, list[i], fmt::format("{}.normalizers[{}]", path, i));
  }
}

SplitBehavior ParseBehavior(const Reader& r, const Json& value, const std::string& path) {
  const std::string name = r.String(value, path);
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  r.Fail(path, fmt::format("unknown split behavior '{}'", name));
}

void AddPreTokenizer(const Reader& r, const Json& spec, const std::string& path,
                     PreTokenizer& pre) {
  const std::string type = r.Type(spec, path);
  if (pre.byte_level()) r.Fail(path, "only the last pre-tokenizer may be ByteLevel");
  if (type == "Sequence") {
    const Json& list = r.Require(spec, "pretokenizers", path);
    if (!list.is_array()) r.Fail(path + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      AddPreTokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", path, i), pre);
    }
  } else if (type == "Split") {
    const Json& pattern = r.Require(spec, "pattern", path);
    r.ExpectObject(pattern, path + ".pattern");
    SplitStep step;
    step.behavior = ParseBehavior(r, r.Require(spec, "behavior", path), path + ".behavior");
    step.invert = r.Bool(spec, "invert", false, path);
    const bool literal = pattern.contains("String");
    if (!literal && !pattern.contains("Regex")) {
      r.Fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string key = literal ? "String" : "Regex";
    const std::string text = r.String(pattern[key], path + ".pattern." + key);
    step.regex = std::make_unique<Regex>(
        text, literal, fmt::format("tokenizer.json '{}': {}.pattern", r.origin(), path));
    pre.AddSplit(std::move(step));
  } else if (type == "ByteLevel") {
    pre.SetByteLevel(r.Bool(spec, "add_prefix_space", true, path),
                     r.Bool(spec, "use_regex", true, path),
                     fmt::format("tokenizer.json '{}': {}", r.origin(), path));
  } else {
    r.Fail(path + ".type", fmt::format("pre-tokenizer type '{}' is not supported (supported: "
                                       "Sequence, Split, ByteLevel)", type));
  }
}

std::vector<std::pair<std::string, std::string>> ParseMerges(const Reader& r, const Json& merges) {
  if (!merges.is_array()) r.Fail("model.merges", "expected an array");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    const std::string path = fmt::format("model.merges[{}]", i);
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        r.Fail(path, fmt::format("expected \"left right\" with exactly one space, got \"{}\"", text));
      }
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2) {
      out.emplace_back(r.String(merge[0], path + "[0]"), r.String(merge[1], path + "[1]"));
    } else {
      r.Fail(path, "expected a string \"left right\" or a pair [\"left\", \"right\"]");
    }
  }
  return out;
}

std::unique_ptr<BpeModel> ParseModel(const Reader& r, const Json& model, bool byte_level,
                                     const std::string& origin) {
  r.ExpectObject(model, "model");
  if (const Json* type = Reader::Optional(model, "type"); type != nullptr) {
    const std::string name = r.String(*type, "model.type");
    if (name != "BPE") {
      r.Fail("model.type", fmt::format("model type '{}' is not supported (supported: BPE)", name));
    }
  }
  if (const Json* dropout = Reader::Optional(model, "dropout");
      dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    r.Fail("model.dropout", "BPE dropout is not supported (encoding must be deterministic)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* value = Reader::Optional(model, key);
        value != nullptr && r.String(*value, std::string("model.") + key) != "") {
      r.Fail(std::string("model.") + key, "is not supported (must be null)");
    }
  }
  const Json& vocab_json = r.Require(model, "vocab", "model");
  r.ExpectObject(vocab_json, "model.vocab");
  TokenMap vocab;
  vocab.reserve(vocab_json.size());
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    vocab.emplace(it.key(), r.Id(it.value(), "model.vocab[\"" + it.key() + "\"]"));
  }
  BpeOptions options;
  if (const Json* unk = Reader::Optional(model, "unk_token")) {
    options.unk_token = r.String(*unk, "model.unk_token");
  }
  options.fuse_unk = r.Bool(model, "fuse_unk", false, "model");
  options.byte_fallback = r.Bool(model, "byte_fallback", false, "model");
  options.ignore_merges = r.Bool(model, "ignore_merges", false, "model");
  const auto merges = ParseMerges(r, r.Require(model, "merges", "model"));
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), byte_level,
                                    "tokenizer.json '" + origin + "': model");
}

AddedVocabulary ParseAddedTokens(const Reader& r, const Json* list, const TokenMap& vocab) {
  AddedVocabulary added;
  if (list == nullptr) {
    added.Build(vocab);
    return added;
  }
  if (!list->is_array()) r.Fail("added_tokens", "expected an array");
  std::vector<std::pair<std::string, int32_t>> declared;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& entry = (*list)[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    r.ExpectObject(entry, path);
    AddedToken token;
    token.content = r.String(r.Require(entry, "content", path), path + ".content");
    token.special = r.Bool(entry, "special", false, path);
    token.single_word = r.Bool(entry, "single_word", false, path);
    token.lstrip = r.Bool(entry, "lstrip", false, path);
    token.rstrip = r.Bool(entry, "rstrip", false, path);
    token.normalized = r.Bool(entry, "normalized", !token.special, path);
    declared.emplace_back(token.content, r.Id(r.Require(entry, "id", path), path + ".id"));
    added.Add(token, vocab);
  }
  added.Build(vocab);
  for (const auto& [content, id] : declared) {
    const auto assigned = added.TokenToId(content);
    if (assigned && *assigned != id) {  // the reference warns and uses its own id, as we do
      DI_LOG_WARN("tokenizer.json: added token '{}' declares id {} but gets id {}", content, id,
                  *assigned);
    }
  }
  return added;
}

}  // namespace

std::unique_ptr<TokenizerImpl> LoadTokenizerJson(std::string_view json, const std::string& origin) {
  const Reader r(origin);
  Json root;
  try {
    root = Json::parse(json.begin(), json.end());
  } catch (const Json::exception& e) {
    DI_THROW("tokenizer.json '{}': invalid JSON: {}", origin, e.what());
  }
  r.ExpectObject(root, "(root)");
  for (const char* key : {"truncation", "padding"}) {
    if (Reader::Optional(root, key) != nullptr) {
      r.Fail(key, "must be null (truncation and padding would change the ids)");
    }
  }
  if (const Json* normalizer = Reader::Optional(root, "normalizer")) {
    CheckNormalizer(r, *normalizer, "normalizer");
  }
  const Json* decoder = Reader::Optional(root, "decoder");
  if (decoder == nullptr) r.Fail("decoder", "missing (supported: ByteLevel)");
  if (const std::string type = r.Type(*decoder, "decoder"); type != "ByteLevel") {
    r.Fail("decoder.type", fmt::format("decoder type '{}' is not supported (supported: ByteLevel)",
                                       type));
  }
  auto pre_tokenizer = std::make_unique<PreTokenizer>();
  if (const Json* spec = Reader::Optional(root, "pre_tokenizer")) {
    AddPreTokenizer(r, *spec, "pre_tokenizer", *pre_tokenizer);
  }
  auto model = ParseModel(r, r.Require(root, "model", "(root)"), pre_tokenizer->byte_level(), origin);
  AddedVocabulary added = ParseAddedTokens(r, Reader::Optional(root, "added_tokens"), model->vocab());
  return std::make_unique<TokenizerImpl>(std::move(model), std::move(added), std::move(pre_tokenizer));
}

}  // namespace deepinfer::tokenizer_internal

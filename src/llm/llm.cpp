#include "llm/llm.h"

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "base/error.h"
#include "llm/stop_matcher.h"
#include "recipe/request_encoding.h"

namespace deepinfer {

namespace {

// Wakes the caller whenever any of its streams has new events.
class Waker {
 public:
  std::function<void()> Notifier() {
    return [this] {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = true;
      cv_.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return ready_; });
    ready_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
};

struct SequenceText {
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  bool stopped = false;  // a stop string matched: later tokens are dropped
};

}  // namespace

LLM::LLM(EngineOptions options) {
  const std::string dir = options.model_dir;
  const std::string tok_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (std::filesystem::exists(tok_path)) {
    tokenizer_ = Tokenizer::FromFile(tok_path);
    if (options.sampleable_vocab <= 0) options.sampleable_vocab = tokenizer_->vocab_size();
  }
  rules_ = &recipe::RulesForModelDir(dir);
  engine_ = std::make_unique<EngineCore>(std::move(options));
}

LLM::~LLM() = default;

const Tokenizer& LLM::tokenizer() const {
  DI_CHECK(tokenizer_ != nullptr, "{} has no tokenizer.json", engine_->info().model_dir);
  return *tokenizer_;
}

std::vector<RequestOutput> LLM::Generate(const std::vector<std::string>& prompts, const SamplingParams& sampling,
                                         const std::function<void(size_t)>& on_done) {
  std::vector<TokenIds> ids;
  for (const std::string& p : prompts) ids.push_back(tokenizer().Encode(p));
  return GenerateIds(ids, std::vector<SamplingParams>(prompts.size(), sampling), on_done);
}

std::vector<RequestOutput> LLM::GenerateIds(const std::vector<TokenIds>& prompts,
                                            const std::vector<SamplingParams>& sampling,
                                            const std::function<void(size_t)>& on_done) {
  DI_CHECK(prompts.size() == sampling.size(), "one SamplingParams per prompt");
  const size_t n = prompts.size();
  std::vector<RequestOutput> outs(n);
  std::vector<std::shared_ptr<RequestStream>> streams(n);
  std::vector<std::vector<SequenceText>> texts(n);
  Waker waker;
  size_t open = 0;
  for (size_t i = 0; i < n; ++i) {
    outs[i].prompt_ids = prompts[i];
    auto stream = engine_->Submit(GenerationRequest{prompts[i], sampling[i], ""});
    if (!stream.ok()) {
      outs[i].status = stream.status();
      if (on_done) on_done(i);
      continue;
    }
    streams[i] = stream.value();
    streams[i]->SetNotifier(waker.Notifier());
    outs[i].outputs.resize(static_cast<size_t>(sampling[i].n));
    texts[i].resize(static_cast<size_t>(sampling[i].n));
    for (int32_t k = 0; k < sampling[i].n; ++k) {
      outs[i].outputs[k].index = k;
      if (tokenizer_) texts[i][k].detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_, true);
      texts[i][k].stops = std::make_unique<StopStringMatcher>(sampling[i].stop);
    }
    ++open;
  }
  while (open > 0) {
    waker.Wait();
    for (size_t i = 0; i < n; ++i) {
      if (!streams[i]) continue;
      for (StreamEvent& ev : streams[i]->Drain()) {
        for (SequenceDelta& d : ev.deltas) {
          CompletionOutput& c = outs[i].outputs[d.index];
          SequenceText& t = texts[i][d.index];
          for (size_t j = 0; j < d.tokens.size() && !t.stopped; ++j) {
            c.token_ids.push_back(d.tokens[j]);
            if (j < d.logprobs.size()) c.logprobs.push_back(d.logprobs[j]);
            if (!t.detok) continue;
            c.text += t.stops->Feed(t.detok->Append(d.tokens[j]));
            if (t.stops->stopped()) {
              t.stopped = true;
              c.stop_string = t.stops->matched();
              c.finish = FinishReason::kStop;
            }
          }
          if (d.finish != FinishReason::kNone && !t.stopped) {
            c.finish = d.finish;
            if (t.detok) c.text += t.stops->Feed(t.detok->Flush()) + t.stops->Finish();
          }
        }
        bool all_stopped = true;
        for (const SequenceText& t : texts[i]) all_stopped &= t.stopped;
        if (all_stopped && !ev.done) engine_->Abort(streams[i]->id());
        if (ev.done) {
          outs[i].usage = ev.usage;
          streams[i].reset();
          --open;
          if (on_done) on_done(i);
          break;
        }
      }
    }
  }
  return outs;
}

ChatOutput LLM::Chat(const recipe::ChatRequest& request, const SamplingParams& sampling,
                     const ChatEventCallback& on_event) {
  ChatOutput out;
  auto encoded = recipe::EncodeChatRequest(request, *rules_);
  if (!encoded.ok()) {
    out.status = encoded.status();
    return out;
  }
  recipe::ParserOptions parser_options = encoded->parser;
  recipe::OutputParser parser(parser_options);
  recipe::OutputAccumulator acc;
  auto stream_or = engine_->Submit(GenerationRequest{tokenizer().Encode(encoded->prompt), sampling, ""});
  if (!stream_or.ok()) {
    out.status = stream_or.status();
    return out;
  }
  auto stream = stream_or.value();
  IncrementalDetokenizer detok(tokenizer(), false);
  auto deliver = [&](const std::vector<recipe::OutputEvent>& events) {
    acc.Add(events);
    if (on_event) {
      for (const auto& e : events) on_event(e);
    }
  };
  FinishReason finish = FinishReason::kNone;
  bool done = false;
  while (!done) {
    stream->WaitFor(std::chrono::milliseconds(100));
    for (StreamEvent& ev : stream->Drain()) {
      for (const SequenceDelta& d : ev.deltas) {
        for (TokenId t : d.tokens) {
          if (!parser.stopped()) deliver(parser.Feed(detok.Append(t)));
        }
        if (d.finish != FinishReason::kNone) finish = d.finish;
      }
      if (parser.stopped() && !ev.done) engine_->Abort(stream->id());
      if (ev.done) {
        out.usage = ev.usage;
        done = true;
      }
    }
  }
  if (!parser.stopped()) deliver(parser.Feed(detok.Flush()));
  deliver(parser.Finish());
  out.message = acc.Take(finish == FinishReason::kLength ? recipe::EngineFinish::kLength : recipe::EngineFinish::kStop);
  return out;
}

}  // namespace deepinfer

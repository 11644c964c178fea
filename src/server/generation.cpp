#include "server/generation.h"

#include <algorithm>

#include "base/logging.h"

namespace deepinfer::server {

using recipe::OutputEvent;

struct Generation::Sequence {
  Sequence(int32_t choice, const Tokenizer& tokenizer, bool skip_special)
      : index(choice), detok(tokenizer, skip_special) {}
  int32_t index;
  IncrementalDetokenizer detok;
  std::unique_ptr<TextProcessor> text;
  recipe::OutputAccumulator fold;
  TokenIds generated;       // consumed tokens (the continuation's context)
  bool in_reasoning = false;
  bool continued = false;   // the forced tool call's second request was submitted
  bool finished = false;
};

struct Generation::EngineRequest {
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<RequestStream> next;  // the continuation, once `stream` is done
  bool first_phase = true;
  int32_t first_choice = 0;
  bool done = false;        // its last event arrived (or it was never submitted)
  bool abort_sent = false;  // we aborted it because every sequence had stopped
};

namespace {

bool IsAnswerEvent(const OutputEvent& event) {
  return event.kind == OutputEvent::Kind::kContentDelta ||
         event.kind == OutputEvent::Kind::kToolCallBegin;
}

}  // namespace

Generation::Generation(EngineClient& engine, const Tokenizer& tokenizer, GenerationSpec spec)
    : engine_(engine), tokenizer_(tokenizer), spec_(std::move(spec)) {
  const int32_t n = std::max(spec_.sampling.n, 1);
  for (size_t p = 0; p < spec_.prompts.size(); ++p) {
    auto request = std::make_unique<EngineRequest>();
    request->first_choice = static_cast<int32_t>(p) * n;
    requests_.push_back(std::move(request));
    usage_.prompt_tokens += static_cast<int64_t>(spec_.prompts[p].size());
    for (int32_t k = 0; k < n; ++k) {
      auto seq = std::make_unique<Sequence>(static_cast<int32_t>(seqs_.size()), tokenizer_,
                                            spec_.skip_special_tokens);
      seq->text = spec_.make_processor();
      seq->in_reasoning = spec_.start_in_reasoning;
      seqs_.push_back(std::move(seq));
    }
  }
}

Generation::~Generation() {
  for (auto& request : requests_) {
    if (request->stream && !request->done) engine_.Abort(request->stream->id());
    if (request->next) engine_.Abort(request->next->id());
  }
}

Status Generation::Start(std::function<void()> notifier) {
  notifier_ = notifier;
  const int32_t n = std::max(spec_.sampling.n, 1);
  // Prefill events first; a prefill that already ends the output needs no engine request.
  for (auto& seq : seqs_) {
    std::vector<OutputEvent> initial = seq->text->TakeInitialEvents();
    if (initial.empty() && !seq->text->stopped()) continue;
    ChoiceUpdate& update = UpdateFor(*seq, pending_);
    seq->fold.Add(initial);
    update.events = std::move(initial);
    if (seq->text->stopped()) FinishSequence(*seq, recipe::EngineFinish::kStop, update);
  }
  for (size_t p = 0; p < requests_.size(); ++p) {
    EngineRequest& request = *requests_[p];
    bool needed = false;
    for (int32_t k = 0; k < n; ++k) needed = needed || !seqs_[request.first_choice + k]->finished;
    if (!needed) {
      request.done = true;
      continue;
    }
    GenerationRequest engine_request;
    engine_request.prompt = spec_.prompts[p];
    engine_request.sampling = spec_.sampling;
    if (spec_.continuation) engine_request.sampling.stop_token_ids.push_back(spec_.continuation->after_token);
    engine_request.cache_salt = spec_.cache_salt;
    Result<std::shared_ptr<RequestStream>> stream = engine_.Submit(std::move(engine_request));
    if (!stream.ok()) {
      for (size_t q = 0; q < p; ++q) {
        if (requests_[q]->stream) engine_.Abort(requests_[q]->stream->id());
        requests_[q]->done = true;
      }
      return stream.status();
    }
    request.stream = std::move(stream.value());
    request.stream->SetNotifier(notifier);
  }
  return Status::Ok();
}

bool Generation::done() const {
  return std::all_of(requests_.begin(), requests_.end(), [](const auto& r) { return r->done; });
}

void Generation::Abort() {
  aborted_ = true;
  for (auto& request : requests_) {
    if (request->stream && !request->done) engine_.Abort(request->stream->id());
    if (request->next) engine_.Abort(request->next->id());
    request->done = true;
  }
}

ChoiceUpdate& Generation::UpdateFor(Sequence& seq, std::vector<ChoiceUpdate>& out) {
  for (ChoiceUpdate& update : out) {
    if (update.index == seq.index) return update;
  }
  out.push_back(ChoiceUpdate{});
  out.back().index = seq.index;
  return out.back();
}

std::vector<ChoiceUpdate> Generation::Poll() {
  std::vector<ChoiceUpdate> out = std::move(pending_);
  pending_.clear();
  if (aborted_) return out;
  for (auto& request : requests_) {
    if (request->done || !request->stream) continue;
    // A continuation replaces the stream inside Consume(); drain until nothing is queued.
    for (;;) {
      std::vector<StreamEvent> events = request->stream->Drain();
      if (events.empty()) break;
      for (StreamEvent& event : events) Consume(*request, event, out);
      if (request->done) break;
    }
    if (request->done || request->abort_sent) continue;
    const int32_t n = std::max(spec_.sampling.n, 1);
    bool all_finished = true;
    for (int32_t k = 0; k < n; ++k) all_finished = all_finished && seqs_[request->first_choice + k]->finished;
    if (all_finished) {
      engine_.Abort(request->stream->id());
      request->abort_sent = true;
    }
  }
  for (ChoiceUpdate& update : out) update.events = recipe::NormalizeEvents(update.events);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return out;
}

void Generation::Consume(EngineRequest& request, StreamEvent& event, std::vector<ChoiceUpdate>& out) {
  const int32_t n = std::max(spec_.sampling.n, 1);
  if (event.engine_ttft_s >= 0 && engine_ttft_s_ < 0) engine_ttft_s_ = event.engine_ttft_s;
  for (const SequenceDelta& delta : event.deltas) {
    if (delta.index < 0 || delta.index >= n) continue;
    Sequence& seq = *seqs_[request.first_choice + delta.index];
    if (seq.finished) continue;
    ChoiceUpdate& update = UpdateFor(seq, out);
    ConsumeTokens(seq, delta, update);
    if (seq.finished) continue;
    switch (delta.finish) {
      case FinishReason::kNone: break;
      case FinishReason::kStop:
        if (ShouldContinue(seq, delta)) Continue(request, seq, update);
        else FinishSequence(seq, recipe::EngineFinish::kStop, update);
        break;
      case FinishReason::kLength: FinishSequence(seq, recipe::EngineFinish::kLength, update); break;
      case FinishReason::kAbort: FailSequence(seq, "the request was aborted by the server", update); break;
      case FinishReason::kError: FailSequence(seq, "the engine failed the request", update); break;
    }
  }
  if (!event.error.ok() || event.done) {
    const std::string why = event.error.ok() ? "the request ended without finishing"
                                             : event.error.message();
    for (int32_t k = 0; k < n; ++k) {
      Sequence& seq = *seqs_[request.first_choice + k];
      const bool continuing = seq.continued && request.next && event.error.ok();
      if (!seq.finished && !continuing) FailSequence(seq, why, UpdateFor(seq, out));
    }
  }
  if (event.done) {
    if (request.first_phase) usage_.cached_tokens += event.usage.cached_prompt_tokens;
    if (request.next && event.error.ok()) {
      request.stream = std::move(request.next);
      request.first_phase = false;
    } else {
      request.done = true;
    }
  }
}

bool Generation::ShouldContinue(const Sequence& seq, const SequenceDelta& delta) const {
  return spec_.continuation && !seq.continued && !seq.text->stopped() && !delta.tokens.empty() &&
         delta.tokens.back() == spec_.continuation->after_token;
}

void Generation::Continue(EngineRequest& request, Sequence& seq, ChoiceUpdate& update) {
  const Continuation& cont = *spec_.continuation;
  seq.continued = true;
  seq.in_reasoning = false;
  std::vector<OutputEvent> events = seq.text->Inject(cont.text);
  seq.fold.Add(events);
  for (auto& e : events) update.events.push_back(std::move(e));
  if (seq.text->stopped()) return FinishSequence(seq, recipe::EngineFinish::kStop, update);
  GenerationRequest next;
  next.prompt = spec_.prompts[static_cast<size_t>(request.first_choice / std::max(spec_.sampling.n, 1))];
  next.prompt.insert(next.prompt.end(), seq.generated.begin(), seq.generated.end());
  next.prompt.insert(next.prompt.end(), cont.text_ids.begin(), cont.text_ids.end());
  const int64_t room = engine_.info().max_model_len - static_cast<int64_t>(next.prompt.size());
  const int64_t left = std::min<int64_t>(spec_.sampling.max_tokens - static_cast<int64_t>(seq.generated.size()), room);
  if (left <= 0) return FinishSequence(seq, recipe::EngineFinish::kLength, update);
  next.sampling = spec_.sampling;
  next.sampling.max_tokens = static_cast<int32_t>(left);
  next.cache_salt = spec_.cache_salt;
  Result<std::shared_ptr<RequestStream>> stream = engine_.Submit(std::move(next));
  if (!stream.ok()) return FailSequence(seq, stream.status().message(), update);
  request.next = std::move(stream.value());
  request.next->SetNotifier(notifier_);
}

void Generation::ConsumeTokens(Sequence& seq, const SequenceDelta& delta, ChoiceUpdate& update) {
  const auto& eos = engine_.info().eos_token_ids;
  for (size_t i = 0; i < delta.tokens.size() && !seq.text->stopped(); ++i) {
    const TokenId token = delta.tokens[i];
    any_token_ = true;
    seq.generated.push_back(token);
    ++usage_.completion_tokens;
    if (seq.in_reasoning) ++usage_.reasoning_tokens;
    // The finishing end-of-sentence or stop token ends the text; it is not decoded (and has
    // no logprob entry: it is not part of the text).
    const bool last = i + 1 == delta.tokens.size();
    const auto& stops = spec_.sampling.stop_token_ids;
    if (last && delta.finish == FinishReason::kStop &&
        (std::find(eos.begin(), eos.end(), token) != eos.end() ||
         std::find(stops.begin(), stops.end(), token) != stops.end())) {
      break;
    }
    if (i < delta.logprobs.size()) update.logprobs.push_back(delta.logprobs[i]);
    std::vector<OutputEvent> events = seq.text->Feed(seq.detok.Append(token));
    if (seq.in_reasoning && std::any_of(events.begin(), events.end(), IsAnswerEvent)) {
      seq.in_reasoning = false;
    }
    seq.fold.Add(events);
    for (auto& e : events) update.events.push_back(std::move(e));
  }
  if (seq.text->stopped()) FinishSequence(seq, recipe::EngineFinish::kStop, update);
}

void Generation::FinishSequence(Sequence& seq, recipe::EngineFinish finish, ChoiceUpdate& update) {
  std::vector<OutputEvent> events;
  if (!seq.text->stopped()) events = seq.text->Feed(seq.detok.Flush());
  for (auto& e : seq.text->Finish()) events.push_back(std::move(e));
  seq.fold.Add(events);
  for (auto& e : events) update.events.push_back(std::move(e));
  ChoiceFinish done;
  done.parsed = seq.fold.Take(finish);
  update.finish = std::move(done);
  seq.finished = true;
}

void Generation::FailSequence(Sequence& seq, const std::string& error, ChoiceUpdate& update) {
  DI_LOG_WARN("choice {} failed: {}", seq.index, error);
  ChoiceFinish done;
  done.parsed = seq.fold.Take(recipe::EngineFinish::kStop);
  done.failed = true;
  done.error = error;
  update.finish = std::move(done);
  seq.finished = true;
}

}  // namespace deepinfer::server

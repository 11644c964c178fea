// The API-specific half of a generation response: choice updates in, wire bytes out. One
// writer per HTTP request; the session (http_session.cpp) drives it:
//
//   streaming:      StreamOpen(), then StreamUpdates(...) per poll, KeepAlive() when idle,
//                   StreamEnd(usage) once the generation is done (or StreamError(...)).
//   non-streaming:  Collect(...) per poll, then Body(usage) (or an error body).
#pragma once

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/generation.h"

namespace deepinfer::server {

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual ApiKind api() const = 0;

  virtual std::string StreamOpen() = 0;
  virtual std::string StreamUpdates(const std::vector<ChoiceUpdate>& updates) = 0;
  virtual std::string StreamEnd(const GenerationUsage& usage) = 0;
  virtual std::string KeepAlive() = 0;
  std::string StreamError(const ApiError& error) { return StreamErrorEvent(api(), error); }

  virtual void Collect(const std::vector<ChoiceUpdate>& updates) = 0;
  virtual std::string Body(const GenerationUsage& usage) = 0;
};

// The first failed choice among `updates`, if any.
inline const ChoiceFinish* FindFailure(const std::vector<ChoiceUpdate>& updates) {
  for (const auto& update : updates) {
    if (update.finish && update.finish->failed) return &*update.finish;
  }
  return nullptr;
}

}  // namespace deepinfer::server

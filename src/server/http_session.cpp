#include "server/http_session.h"

#include <utility>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "base/logging.h"
#include "base/timer.h"
#include "recipe/chat_request.h"
#include "server/anthropic_messages.h"
#include "server/json_out.h"
#include "server/openai_completions.h"

namespace deepinfer::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::use_awaitable;

namespace {

enum class Route { kNone, kHealth, kMetrics, kModels, kModel, kChat, kCompletions, kMessages, kCountTokens };

struct RouteMatch {
  Route route = Route::kNone;
  http::verb method = http::verb::get;
  const char* label = "other";
  bool protected_route = false;
  std::string model_id = {};  // kModel
};

std::string_view Sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

RouteMatch Resolve(boost::beast::string_view raw_target) {
  std::string_view target = Sv(raw_target);
  if (const size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  if (target == "/health") return {Route::kHealth, http::verb::get, "health"};
  if (target == "/metrics") return {Route::kMetrics, http::verb::get, "metrics"};
  if (target.starts_with("/v1/")) target.remove_prefix(3);
  if (target == "/models") return {Route::kModels, http::verb::get, "models", true};
  if (target.starts_with("/models/") && target.size() > 8) {
    return {Route::kModel, http::verb::get, "models", true, std::string(target.substr(8))};
  }
  if (target == "/chat/completions") return {Route::kChat, http::verb::post, "chat_completions", true};
  if (target == "/completions") return {Route::kCompletions, http::verb::post, "completions", true};
  if (target == "/messages") return {Route::kMessages, http::verb::post, "messages", true};
  if (target == "/messages/count_tokens") return {Route::kCountTokens, http::verb::post, "count_tokens", true};
  return {};
}

// Compares keys without an early exit on the first differing byte (the length may leak).
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

ApiKind ApiOf(const http::request<http::string_body>& request, Route route) {
  if (route == Route::kMessages || route == Route::kCountTokens) return ApiKind::kAnthropic;
  return request.count("anthropic-version") > 0 ? ApiKind::kAnthropic : ApiKind::kOpenAI;
}

std::string ModelsBody(const ServerContext& ctx, bool anthropic, const std::string* only) {
  Json data = Json::array();
  std::vector<std::string> names = ctx.options.served_model_names;
  if (names.empty()) names.push_back(ctx.model_name());
  for (const std::string& name : names) {
    if (only != nullptr && name != *only) continue;
    if (anthropic) {
      data.push_back({{"type", "model"}, {"id", name}, {"display_name", name},
                      {"created_at", "1970-01-01T00:00:00Z"}});
    } else {
      data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "deepinfer"},
                      {"root", ctx.engine.info().model_dir}, {"max_model_len", ctx.engine.info().max_model_len}});
    }
  }
  if (only != nullptr) return data.empty() ? "" : DumpJson(data.front());
  if (anthropic) {
    return DumpJson(Json{{"data", data}, {"has_more", false}, {"first_id", data.front()["id"]},
                                   {"last_id", data.back()["id"]}});
  }
  return DumpJson(Json{{"object", "list"}, {"data", data}});
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, ServerShared& shared)
    : stream_(std::move(socket)), shared_(shared),
      wake_(std::make_shared<Wake>(stream_.get_executor())) {
  shared_.ctx.metrics.ConnectionOpened();
}

HttpSession::~HttpSession() { shared_.ctx.metrics.ConnectionClosed(); }

net::awaitable<void> HttpSession::Run() {
  auto self = shared_from_this();
  try {
    for (;;) {
      Request request;
      if (!co_await ReadRequest(request)) break;
      if (!co_await Dispatch(request)) break;
      if (shared_.draining.load()) break;
    }
  } catch (const std::exception& e) {
    DI_LOG_ERROR("http session: {}", e.what());
  }
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

net::awaitable<bool> HttpSession::ReadRequest(Request& request) {
  const ServerOptions& options = shared_.ctx.options;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
  beast::error_code ec;
  stream_.expires_after(options.idle_timeout);
  co_await http::async_read_header(stream_, buffer_, parser, net::redirect_error(use_awaitable, ec));
  endpoint_ = "other";
  keep_alive_ = false;
  http10_ = false;
  if (ec == http::error::header_limit) {
    co_await WriteError(ApiKind::kOpenAI, {ErrorKind::kRequestTooLarge, "request headers are too large"});
    co_await LingeringClose();
    co_return false;
  }
  if (ec == http::error::body_limit) {  // the Content-Length alone is over the limit
    co_await RejectTooLarge(parser.get());
    co_return false;
  }
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset) {
    co_return false;
  }
  if (ec) {
    co_await WriteError(ApiKind::kOpenAI, {ErrorKind::kInvalidRequest, "malformed HTTP request: " + ec.message()});
    co_return false;
  }
  t_arrival_ = NowSeconds();
  t_first_token_ = -1;
  http10_ = parser.get().version() < 11;
  if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
    stream_.expires_after(options.write_timeout);
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await net::async_write(stream_, net::buffer(kContinue), net::redirect_error(use_awaitable, ec));
    if (ec) co_return false;
  }
  stream_.expires_after(options.idle_timeout);
  co_await http::async_read(stream_, buffer_, parser, net::redirect_error(use_awaitable, ec));
  if (ec == http::error::body_limit) {  // a chunked body grew over the limit
    co_await RejectTooLarge(parser.get());
    co_return false;
  }
  if (ec) co_return false;
  request = parser.release();
  keep_alive_ = request.keep_alive();
  co_return true;
}

net::awaitable<void> HttpSession::RejectTooLarge(const Request& header) {
  const RouteMatch match = Resolve(header.target());
  endpoint_ = match.label;
  co_await WriteError(ApiOf(header, match.route),
                      {ErrorKind::kRequestTooLarge, fmt::format("request body is larger than {} bytes",
                                                                shared_.ctx.options.max_body_bytes)});
  co_await LingeringClose();
}

bool HttpSession::Authorized(const Request& request) const {
  const std::string& key = shared_.ctx.options.api_key;
  if (key.empty()) return true;
  const std::string_view auth = Sv(request[http::field::authorization]);
  if (auth.size() > 7 && beast::iequals(boost::beast::string_view(auth.data(), 7), "Bearer ")) {
    return ConstantTimeEquals(auth.substr(7), key);  // Bearer wins when both are present
  }
  auto it = request.find("x-api-key");
  return it != request.end() && ConstantTimeEquals(Sv(it->value()), key);
}

net::awaitable<bool> HttpSession::Dispatch(Request& request) {
  const RouteMatch match = Resolve(request.target());
  endpoint_ = match.label;
  const ApiKind api = ApiOf(request, match.route);
  const ServerContext& ctx = shared_.ctx;
  if (match.route == Route::kNone) {
    co_return co_await WriteError(api, {ErrorKind::kNotFound,
                                        fmt::format("no route for {} {}", std::string(request.method_string()),
                                                    std::string(request.target()))});
  }
  if (request.method() != match.method) {
    Reply reply(405, "application/json", "");
    reply.allow = match.method == http::verb::get ? "GET" : "POST";
    reply.body = ErrorBody(api, {ErrorKind::kMethodNotAllowed,
                                 fmt::format("method {} is not allowed here; use {}",
                                             std::string(request.method_string()), reply.allow)});
    co_return co_await Write(std::move(reply));
  }
  if (match.protected_route && !Authorized(request)) {
    co_return co_await WriteError(api, {ErrorKind::kAuthentication, "invalid or missing API key"});
  }
  switch (match.route) {
    case Route::kHealth:
      if (shared_.draining.load()) co_return co_await WriteError(api, {ErrorKind::kOverloaded, "shutting down"});
      co_return co_await Write({200, "application/json", R"({"status":"ok"})"});
    case Route::kMetrics:
      co_return co_await Write({200, "text/plain; version=0.0.4; charset=utf-8",
                                ctx.metrics.Render(ctx.engine.Stats(), ctx.engine.info())});
    case Route::kModels:
      co_return co_await Write({200, "application/json", ModelsBody(ctx, api == ApiKind::kAnthropic, nullptr)});
    case Route::kModel: {
      std::string body = ModelsBody(ctx, api == ApiKind::kAnthropic, &match.model_id);
      if (body.empty()) {
        co_return co_await WriteError(api, {ErrorKind::kNotFound,
                                            fmt::format("The model `{}` does not exist.", match.model_id)});
      }
      co_return co_await Write({200, "application/json", std::move(body)});
    }
    case Route::kChat: co_return co_await HandleGeneration(request, Endpoint::kChatCompletions);
    case Route::kCompletions: co_return co_await HandleGeneration(request, Endpoint::kCompletions);
    case Route::kMessages: co_return co_await HandleGeneration(request, Endpoint::kMessages);
    case Route::kCountTokens: co_return co_await HandleGeneration(request, Endpoint::kCountTokens);
    case Route::kNone: break;
  }
  co_return false;
}

net::awaitable<bool> HttpSession::HandleGeneration(Request& request, Endpoint endpoint) {
  const ApiKind api = endpoint == Endpoint::kMessages || endpoint == Endpoint::kCountTokens ? ApiKind::kAnthropic
                                                                                             : ApiKind::kOpenAI;
  const ServerContext& ctx = shared_.ctx;
  if (shared_.draining.load()) {
    keep_alive_ = false;
    co_return co_await WriteError(api, {ErrorKind::kOverloaded, "the server is shutting down"});
  }
  Status status = CheckJsonDepth(request.body(), ctx.options.max_json_depth);
  Result<recipe::OrderedJson> body = status.ok() ? recipe::ParseJsonText(request.body())
                                                 : Result<recipe::OrderedJson>(status);
  request.body().clear();
  request.body().shrink_to_fit();
  if (!body.ok()) co_return co_await WriteError(api, ErrorFromStatus(body.status()));
  // The converters report bad input as Status; a JSON type error that slips through one of
  // them is still the client's input, never a crash.
  Result<GenerationPlan> plan = InvalidArgument("unreachable");
  try {
    if (endpoint == Endpoint::kCountTokens) {
      Result<std::string> counted = CountMessageTokens(body.value(), ctx);
      if (!counted.ok()) co_return co_await WriteError(api, ErrorFromStatus(counted.status()));
      co_return co_await Write({200, "application/json", std::move(counted.value())});
    }
    plan = endpoint == Endpoint::kChatCompletions ? PlanChatCompletion(body.value(), ctx)
           : endpoint == Endpoint::kCompletions   ? PlanCompletion(body.value(), ctx)
                                                  : PlanMessages(body.value(), ctx);
  } catch (const Json::exception& e) {
    plan = InvalidArgument(fmt::format("invalid request: {}", e.what()));
  }
  if (!plan.ok()) co_return co_await WriteError(api, ErrorFromStatus(plan.status()));
  co_return co_await RunGeneration(request, api, std::move(plan.value()));
}

net::awaitable<bool> HttpSession::RunGeneration(const Request& request, ApiKind api, GenerationPlan plan) {
  const ServerContext& ctx = shared_.ctx;
  Generation gen(ctx.engine, ctx.tokenizer, std::move(plan.spec));
  Status status = gen.Start([wake = wake_] { wake->Post(); });
  if (!status.ok()) co_return co_await WriteError(api, ErrorFromStatus(status));
  ctx.metrics.GenerationStarted();
  shared_.active_generations.fetch_add(1);
  StartWatch();
  GenerationOutcome outcome = plan.stream ? co_await StreamGeneration(request, api, gen, *plan.writer)
                                          : co_await CollectGeneration(api, gen, *plan.writer);
  co_await StopWatch();
  if (outcome == GenerationOutcome::kCompleted) RecordLatency(gen, plan.stream);
  const GenerationUsage& usage = gen.usage();
  ctx.metrics.AddTokens(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens);
  ctx.metrics.GenerationEnded(outcome);
  shared_.active_generations.fetch_sub(1);
  co_return outcome == GenerationOutcome::kCompleted && keep_alive_ && !peer_closed_;
}

}  // namespace deepinfer::server

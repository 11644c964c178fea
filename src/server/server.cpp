#include "server/server.h"

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "base/logging.h"
#include "server/http_session.h"

namespace deepinfer::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// After the engine drained, responses still being written get this long to flush.
constexpr std::chrono::seconds kFlushTimeout{5};
constexpr std::chrono::milliseconds kFlushPoll{20};

net::awaitable<void> RunSession(std::shared_ptr<HttpSession> session) { co_await session->Run(); }

}  // namespace

struct Server::Impl {
  Impl(ServerOptions opts, EngineClient& engine, const Tokenizer& tokenizer, const recipe::EncodingRules& rules)
      : options(std::move(opts)),
        shared{ServerContext{engine, tokenizer, rules, options, metrics}},
        work(net::make_work_guard(io)), acceptor(io), signals(io) {}

  net::awaitable<void> AcceptLoop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(net::make_strand(io),
                                                          net::redirect_error(net::use_awaitable, ec));
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        DI_LOG_WARN("accept: {}", ec.message());
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto executor = socket.get_executor();
      net::co_spawn(executor, RunSession(std::make_shared<HttpSession>(std::move(socket), shared)), net::detached);
    }
  }

  void BeginShutdown() {
    if (shutdown_started.exchange(true)) return;
    DI_LOG_INFO("shutting down: no new requests; draining running ones (timeout {} ms)",
                options.drain_timeout.count());
    shared.draining.store(true);
    net::post(io, [this] {
      boost::system::error_code ec;
      acceptor.close(ec);
    });
    drain_thread = std::thread([this] {
      shared.ctx.engine.Drain(options.drain_timeout);
      const auto deadline = std::chrono::steady_clock::now() + kFlushTimeout;
      while (shared.active_generations.load() > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(kFlushPoll);
      }
      DI_LOG_INFO("drained; stopping the server");
      work.reset();
      io.stop();
    });
  }

  void WatchSignals() {
    signals.add(SIGINT);
    signals.add(SIGTERM);
    signals.async_wait([this](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      DI_LOG_INFO("signal {}: draining (a second signal exits at once)", signal);
      BeginShutdown();
      signals.async_wait([](const boost::system::error_code& again, int) {
        if (again) return;
        DI_LOG_WARN("second signal: exiting without draining");
        std::_Exit(130);
      });
    });
  }

  ServerOptions options;
  ServerMetrics metrics;
  ServerShared shared;
  net::io_context io;
  net::executor_work_guard<net::io_context::executor_type> work;
  tcp::acceptor acceptor;
  net::signal_set signals;
  std::vector<std::thread> threads;
  std::thread drain_thread;
  std::atomic<bool> shutdown_started{false};
  std::once_flag joined;
};

Server::Server(ServerOptions options, EngineClient& engine, const Tokenizer& tokenizer,
               const recipe::EncodingRules& rules)
    : impl_(std::make_unique<Impl>(std::move(options), engine, tokenizer, rules)) {}

Server::~Server() {
  if (!impl_->threads.empty()) {
    Shutdown();
    Wait();
  }
}

void Server::Start() {
  Impl& impl = *impl_;
  boost::system::error_code ec;
  const std::string host = impl.options.host == "localhost" ? "127.0.0.1" : impl.options.host;
  const net::ip::address address = net::ip::make_address(host, ec);
  if (ec) DI_THROW("--host {}: not an IP address ({})", impl.options.host, ec.message());
  const tcp::endpoint endpoint(address, impl.options.port);
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) DI_THROW("cannot listen on {}:{}: {}", host, impl.options.port, ec.message());
  port_ = impl.acceptor.local_endpoint().port();
  if (impl.options.handle_signals) impl.WatchSignals();
  net::co_spawn(impl.io, impl.AcceptLoop(), net::detached);
  const int num_threads = std::max(1, impl.options.io_threads);
  for (int k = 0; k < num_threads; ++k) impl.threads.emplace_back([&impl] { impl.io.run(); });
  DI_LOG_INFO("serving {} on http://{}:{}", impl.shared.ctx.model_name(), host, port_);
}

void Server::Shutdown() { impl_->BeginShutdown(); }

void Server::Wait() {
  std::call_once(impl_->joined, [this] {
    for (auto& thread : impl_->threads) thread.join();
    if (impl_->drain_thread.joinable()) impl_->drain_thread.join();
  });
}

}  // namespace deepinfer::server

// A wake-up signal for one session coroutine: any thread may Post(); the coroutine, running on
// the session's strand, awaits Wait(). A Post() that arrives while nobody waits is remembered.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <memory>

namespace deepinfer::server {

class Wake : public std::enable_shared_from_this<Wake> {
 public:
  explicit Wake(const boost::asio::any_io_executor& strand) : timer_(strand) {}

  // Any thread (the engine's notifier): hands the signal to the strand.
  void Post() {
    boost::asio::post(timer_.get_executor(), [self = shared_from_this()] { self->Notify(); });
  }
  // On the strand only.
  void Notify() {
    signaled_ = true;
    timer_.cancel();
  }
  // On the strand: true when signaled, false when `timeout` passed first.
  boost::asio::awaitable<bool> Wait(std::chrono::milliseconds timeout) {
    if (!signaled_) {
      timer_.expires_after(timeout);
      boost::system::error_code ec;
      co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    const bool woke = signaled_;
    signaled_ = false;
    co_return woke;
  }

 private:
  boost::asio::steady_timer timer_;
  bool signaled_ = false;
};

}  // namespace deepinfer::server

// Waiting, in an HTTP connection's coroutine, for an answer that another thread hands to a
// callback (the core strand's metrics snapshot or ADMIN answer, a login thread's verdict): the
// coroutine resumes on its own executor with the value. Private to broker/admin.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <utility>

namespace escrow::broker {

// Runs `start(callback)` and completes with what the callback is given, from whatever thread
// calls it. Name the awaitable before co_await-ing it (g++ 12: see console_api.cpp's run_admin).
template <typename T, typename Start>
boost::asio::awaitable<T> wait_for(Start start) {
  namespace asio = boost::asio;
  return asio::async_initiate<decltype(asio::use_awaitable), void(T)>(
      [start = std::move(start)](auto handler) mutable {
        // The callback must be copyable (a std::function); the coroutine's handler is move-only.
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        start([h](T value) {
          auto ex = asio::get_associated_executor(*h);
          asio::post(ex, [h, value = std::move(value)]() mutable { (*h)(std::move(value)); });
        });
      },
      asio::use_awaitable);
}

}  // namespace escrow::broker

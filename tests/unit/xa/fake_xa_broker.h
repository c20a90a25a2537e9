// A scripted fake broker for the XA switch's unit tests: it accepts any number of connections on
// a loopback port, answers CONNECT as the test says (CONNECTED with or without the `xa` header,
// an ERROR, silence, a close) and every other frame with a receipt with what the test's script
// returns for it: a RECEIPT with any `xa-result` (or none), an ERROR, silence, a close. So a test
// can make the switch meet every answer a broker could give, including the ones Escrow's never
// gives. No escrowd needed.
//
// Thread safety: set_connect() and set_script() may be called from any thread; the script runs on
// the fake's connection threads, one frame at a time (a mutex).
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <stdexcept>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "escrow/frame.h"

namespace escrow::test {

// What the fake does with one frame.
struct fake_answer {
  enum class kind { result, no_result, error, silence, close } what = kind::result;
  std::string result;  // kind::result: the xa-result value, e.g. "XA_OK" or "XA_BOGUS"
  std::string body;    // kind::result: the body (XA-RECOVER's list), content-type text/plain
  std::vector<std::pair<std::string, std::string>> headers;  // more headers for the RECEIPT

  static fake_answer code(std::string name, std::string body = {}) {
    fake_answer a;
    a.result = std::move(name);
    a.body = std::move(body);
    return a;
  }
  static fake_answer of(kind k) {
    fake_answer a;
    a.what = k;
    return a;
  }
};

enum class connect_answer { xa, no_xa, error, silence, close };

class fake_xa_broker {
 public:
  // The script: the answer to `f`, the nth XA frame (from 1) this fake has seen since the script
  // was set. Frames without a receipt get nothing; non-XA frames with one get a plain RECEIPT.
  using script = std::function<fake_answer(const frame& f, int nth)>;

  fake_xa_broker() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 64) != 0)
      throw std::runtime_error("fake_xa_broker: cannot listen on 127.0.0.1");
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~fake_xa_broker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return live_ == 0; });
    ::close(listener_);
  }

  fake_xa_broker(const fake_xa_broker&) = delete;
  fake_xa_broker& operator=(const fake_xa_broker&) = delete;

  std::uint16_t port() const { return port_; }

  void set_connect(connect_answer a) {
    std::lock_guard lock(mutex_);
    connect_ = a;
  }
  void set_script(script s) {
    std::lock_guard lock(mutex_);
    script_ = std::move(s);
    nth_ = 0;
  }
  // The XA frames seen since the script was set, in order.
  std::vector<frame> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  void clear_seen() {
    std::lock_guard lock(mutex_);
    seen_.clear();
  }

 private:
  void accept_loop() {
    for (;;) {
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      std::lock_guard lock(mutex_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      fds_.push_back(fd);
      ++live_;
      std::thread([this, fd] { serve(fd); }).detach();  // the destructor waits for live_ == 0
    }
  }

  static void write_frame(int fd, const frame& f) {
    std::string bytes = encode(f);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  void serve(int fd) {
    frame_parser parser;
    std::vector<frame> frames;
    char buffer[4096];
    bool open = true;
    while (open) {
      ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      frames.clear();
      if (!parser.feed(std::string_view(buffer, static_cast<std::size_t>(n)), frames)) break;
      for (const frame& f : frames) {
        if (!answer(fd, f)) {
          open = false;
          break;
        }
      }
    }
    ::shutdown(fd, SHUT_RDWR);
    std::lock_guard lock(mutex_);
    std::erase(fds_, fd);
    ::close(fd);
    if (--live_ == 0) idle_.notify_all();
  }

  // Answers one frame; false: close the connection.
  bool answer(int fd, const frame& f) {
    if (f.command == "CONNECT" || f.command == "STOMP") {
      connect_answer a;
      {
        std::lock_guard lock(mutex_);
        a = connect_;
      }
      switch (a) {
        case connect_answer::xa:
          write_frame(fd, frame{"CONNECTED",
                                {{"version", "1.2"},
                                 {"heart-beat", "0,0"},
                                 {"server", "fake-xa-broker"},
                                 {"xa", "XA-START,XA-END,XA-PREPARE,XA-COMMIT,XA-ROLLBACK,XA-RECOVER,XA-FORGET"}},
                                {}});
          return true;
        case connect_answer::no_xa:
          write_frame(fd, frame{"CONNECTED", {{"version", "1.2"}, {"heart-beat", "0,0"}}, {}});
          return true;
        case connect_answer::error:
          write_frame(fd, frame{"ERROR", {{"message", "login refused"}}, {}});
          return false;
        case connect_answer::silence: return true;
        case connect_answer::close: return false;
      }
    }
    const std::string* receipt = f.find("receipt");
    if (!receipt) return true;
    if (!f.command.starts_with("XA-")) {
      write_frame(fd, frame{"RECEIPT", {{"receipt-id", *receipt}}, {}});
      return f.command != "DISCONNECT";
    }
    fake_answer a;
    {
      std::lock_guard lock(mutex_);
      seen_.push_back(f);
      a = script_ ? script_(f, ++nth_) : fake_answer::code("XA_OK");
    }
    switch (a.what) {
      case fake_answer::kind::result: {
        frame r{"RECEIPT", {{"receipt-id", *receipt}, {"xa-result", a.result}}, {}};
        for (auto& h : a.headers) r.headers.push_back(h);
        if (!a.body.empty()) {
          r.body = a.body;
          r.add("content-type", "text/plain");
          r.add("content-length", std::to_string(r.body.size()));
        }
        write_frame(fd, r);
        return true;
      }
      case fake_answer::kind::no_result: write_frame(fd, frame{"RECEIPT", {{"receipt-id", *receipt}}, {}}); return true;
      case fake_answer::kind::error:
        write_frame(fd, frame{"ERROR", {{"receipt-id", *receipt}, {"message", "scripted ERROR"}}, {}});
        return false;
      case fake_answer::kind::silence: return true;
      case fake_answer::kind::close: return false;
    }
    return true;
  }

  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::thread acceptor_;
  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::vector<int> fds_;
  int live_ = 0;  // connection threads still running
  std::condition_variable idle_;
  connect_answer connect_ = connect_answer::xa;
  script script_;
  int nth_ = 0;
  std::vector<frame> seen_;
};

}  // namespace escrow::test

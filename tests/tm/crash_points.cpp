// Crash and pause points (crash_points.h).
#include "crash_points.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>

namespace escrow::tm {
namespace {

constexpr std::array<std::string_view, kPoints> kNames{"before-prepare", "between-prepares", "after-log",
                                                       "during-commit"};

}  // namespace

std::string_view to_string(point p) { return kNames[static_cast<std::size_t>(p)]; }

std::optional<point> parse_point(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<point>(i);
  return std::nullopt;
}

bool crash_points::add(action a, std::string_view spec, std::string* error) {
  auto colon = spec.find(':');
  auto p = parse_point(spec.substr(0, colon));
  long nth = 0;
  std::string_view count = colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), nth);
  if (!p || count.empty() || ec != std::errc() || end != count.data() + count.size() || nth < 1) {
    *error = "bad point '" + std::string(spec) +
             "': use POINT:N with POINT one of before-prepare, between-prepares, after-log, during-commit and N >= 1";
    return false;
  }
  triggers_.push_back({a, *p, nth});
  return true;
}

void crash_points::reached(point p) {
  long n = ++counts_[static_cast<std::size_t>(p)];
  for (const auto& t : triggers_) {
    if (t.where != p || t.nth != n) continue;
    if (t.what == action::crash) {
      std::fprintf(stderr, "escrow-tm: crash point %s %ld: SIGKILL\n", std::string(to_string(p)).c_str(), n);
      std::fflush(stderr);
      ::kill(::getpid(), SIGKILL);
      ::_exit(137);  // not reached
    }
    std::lock_guard lock(pause_mutex_);
    std::printf("paused %s %ld\n", std::string(to_string(p)).c_str(), n);
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);  // EOF also resumes
  }
}

}  // namespace escrow::tm

// escrow-tm: a small X/Open transaction manager for tests and as the example of docs/xa.md. It
// enlists Escrow through escrow_xa_switch and PostgreSQL through libpq, keeps a durable decision
// log, recovers at start, then runs the orders workload (workload.h) on several threads.
//
//   escrow-tm --escrow "host=127.0.0.1 port=61613" --pg "host=127.0.0.1 port=5432 user=postgres"
//             --log tm.log [--threads 4] [--idle-exit-ms 3000] [--name tm] [--no-db]
//             [--input /queue/orders] [--output /queue/confirmations] [--rmid 1]
//             [--crash-at POINT:N]... [--pause-at POINT:N]... [--recover-only] [--retry-seconds 120]
//   escrow-tm --coordinated NAME --escrow ... --pg ... [--threads 4] [--idle-exit-ms 3000] [--input ...] [--output ...]
//   escrow-tm --load-orders N [--body-size 1024] --escrow ... [--input /queue/orders]
//
// Points (crash_points.h): before-prepare, between-prepares, after-log, during-commit. --crash-at
// kills the manager with SIGKILL when the Nth transaction reaches the point; --pause-at prints
// "paused POINT N" and waits for a line on stdin (a test kills escrowd or restarts PostgreSQL
// meanwhile). Prints "recovered committed=A rolled_back=B" after recovery and, at the end,
// "finished committed=C rolled_back=D". Exit 0 on success, 1 on a failure it could not get past
// (what is in doubt stays for the next start's recovery), 2 on bad options.
//
// --coordinated NAME runs the same workload without this manager: escrowd coordinates PostgreSQL
// (BEGIN coordinate:postgresql/NAME, coordinated_workload.h); no decision log, no recovery.
// --load-orders N sends N orders (order-id order-NNNNNNN, persistent, bodies of --body-size bytes)
// to the input queue and exits. Both workloads end with "RESULT mode=2pc|coordinated threads=T
// committed=C ... tx_per_s=R cpu_s=S" (rate_meter.h: from the first commit to the last; this
// process's CPU), what scripts/bench reads.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

#include "coordinated_workload.h"
#include "coordinator.h"
#include "escrow_participant.h"
#include "pg_participant.h"
#include "rate_meter.h"
#include "recovery.h"
#include "workload.h"

namespace {

// The format id of this manager's xids ("ETM1").
constexpr long kFormatId = 0x45544d31;

int usage(const std::string& why) {
  std::fprintf(stderr, "escrow-tm: %s\nsee the comment at the top of tests/tm/main.cpp or docs/xa.md\n", why.c_str());
  return 2;
}

std::string random_run_id() {
  std::random_device device;
  char text[9];
  std::snprintf(text, sizeof text, "%08x", device());
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace escrow::tm;
  workload_options options;
  std::string log_path;
  std::string name = "tm";
  bool recover_only = false;
  long retry_seconds = 120;
  crash_points points;
  std::string coordinated;  // --coordinated NAME
  long load_count = 0;      // --load-orders N
  long body_size = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    std::string error;
    if (arg == "--no-db") {
      options.use_database = false;
    } else if (arg == "--recover-only") {
      recover_only = true;
    } else if ((v = value()) == nullptr) {
      return usage("option " + std::string(arg) + " needs a value (or is unknown)");
    } else if (arg == "--escrow") {
      options.open_string = v;
    } else if (arg == "--pg") {
      options.conninfo = v;
    } else if (arg == "--log") {
      log_path = v;
    } else if (arg == "--name") {
      name = v;
    } else if (arg == "--input") {
      options.input = v;
    } else if (arg == "--output") {
      options.output = v;
    } else if (arg == "--threads") {
      options.threads = std::atoi(v);
    } else if (arg == "--rmid") {
      options.rmid = std::atoi(v);
    } else if (arg == "--idle-exit-ms") {
      options.idle_exit = std::chrono::milliseconds(std::atol(v));
    } else if (arg == "--retry-seconds") {
      retry_seconds = std::atol(v);
    } else if (arg == "--crash-at") {
      if (!points.add(crash_points::action::crash, v, &error)) return usage(error);
    } else if (arg == "--pause-at") {
      if (!points.add(crash_points::action::pause, v, &error)) return usage(error);
    } else if (arg == "--coordinated") {
      coordinated = v;
    } else if (arg == "--load-orders") {
      load_count = std::atol(v);
    } else if (arg == "--body-size") {
      body_size = std::atol(v);
    } else {
      return usage("unknown option " + std::string(arg));
    }
  }
  if (load_count > 0 || !coordinated.empty()) {
    if (options.threads < 1 || body_size < 0) return usage("--threads must be at least 1, --body-size at least 0");
    escrow::client::connect_options stomp;
    std::string error;
    if (!parse_open_string(options.open_string, stomp, &error)) return usage(error);
    try {
      if (load_count > 0) {
        load_orders(stomp, options.input, load_count, static_cast<std::size_t>(body_size));
        std::printf("loaded %ld orders into %s\n", load_count, options.input.c_str());
        return 0;
      }
      if (options.conninfo.empty()) return usage("--pg CONNINFO is required with --coordinated");
      {
        pg_participant pg(options.conninfo);
        pg.reopen();
        create_orders_table(pg);
      }
      coordinated_options co{stomp, coordinated, options.conninfo, options.input, options.output, options.threads,
                             options.idle_exit};
      workload_counts counts;
      coordinated_counts extra;
      rate_meter meter(counts.committed);
      run_coordinated_workers(co, counts, extra);
      meter.stop();
      std::printf("finished committed=%ld rolled_back=%ld pending=%ld\n", counts.committed.load(),
                  counts.rolled_back.load(), extra.pending.load());
      std::printf("RESULT mode=coordinated threads=%d committed=%ld rolled_back=%ld pending=%ld failures=%ld "
                  "unknown=%ld seconds=%.3f tx_per_s=%.1f cpu_s=%.3f\n",
                  options.threads, counts.committed.load(), counts.rolled_back.load(), extra.pending.load(),
                  extra.failures.load(), extra.unknown.load(), meter.seconds(), meter.per_second(),
                  rate_meter::cpu_seconds());
      std::fflush(stdout);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "escrow-tm: stopped: %s\n", e.what());
      return 1;
    }
  }
  if (log_path.empty()) return usage("--log PATH is required (the decision log)");
  if (options.use_database && options.conninfo.empty()) return usage("--pg CONNINFO is required (or --no-db)");
  if (options.threads < 1 || retry_seconds < 1) return usage("--threads and --retry-seconds must be at least 1");
  options.format_id = kFormatId;
  options.gtrid_prefix = name + ":";
  options.run_id = random_run_id();

  try {
    decision_log log(log_path);
    coordinator coord(log, points, std::chrono::seconds(retry_seconds));
    {
      // Recovery on the main thread, with its own connections, before any worker starts.
      escrow_participant escrow(options.xa_switch, options.rmid, options.open_string);
      std::vector<participant*> participants{&escrow};
      std::optional<pg_participant> pg;
      if (options.use_database) {
        pg.emplace(options.conninfo);
        participants.push_back(&*pg);
        coord.persist(*pg, [&] { create_orders_table(*pg); });
      }
      auto r = recover(coord, log, participants, kFormatId, options.gtrid_prefix);
      std::printf("recovered committed=%d rolled_back=%d\n", r.committed, r.rolled_back);
      std::fflush(stdout);
    }
    if (recover_only) return 0;
    workload_counts counts;
    rate_meter meter(counts.committed);
    run_workers(options, coord, counts);
    meter.stop();
    std::printf("finished committed=%ld rolled_back=%ld\n", counts.committed.load(), counts.rolled_back.load());
    std::printf("RESULT mode=2pc threads=%d committed=%ld rolled_back=%ld seconds=%.3f tx_per_s=%.1f cpu_s=%.3f\n",
                options.threads, counts.committed.load(), counts.rolled_back.load(), meter.seconds(),
                meter.per_second(), rate_meter::cpu_seconds());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "escrow-tm: stopped: %s (anything in doubt is finished by the next start's recovery)\n",
                 e.what());
    return 1;
  }
}

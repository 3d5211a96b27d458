// Logging: the one place OctoPipe's processes get their loggers (a logger factory in the style
// of ASTRA-sim's LoggerFactory). Each component logs through its own named spdlog logger —
// "rpc", "jobs", "replan", "agents", "store", ... — so a line says where it came from, and
// `main` sets the level and the output format for all of them once with Configure.
//
//   auto log = logging::Logger("replan");
//   logging::Event(*log, spdlog::level::info, "re-plan decision",
//                  {{"job", job_id}, {"reason", "measured"}, {"deviation", 0.31}});
//
// Two output formats (LogOptions::json):
//   text:  2026-12-01T03:04:05.678Z info  [replan] re-plan decision job=job-1 ...
//          (fields as key=value; strings with spaces or quotes are JSON-quoted)
//   json:  {"time":"2026-12-01T03:04:05.678Z","level":"info","logger":"replan",
//           "msg":"re-plan decision","job":"job-1","reason":"measured","deviation":0.31}
// JSON lines are one object per line (JSON-lines), fields after the fixed keys in the order
// given; plain `logger->info(...)` calls come out with the fixed keys only.
//
// Thread safety: Logger, Event and the loggers themselves may be used from any thread.
// Configure replaces the sinks of every logger and must be called before other threads log
// (in `main`, or at the start of a test). Before any Configure, loggers write text at `info`
// to stderr. The loggers are synchronous: a line is formatted and written by the caller.
#ifndef OCTOPIPE_LOGGING_LOGGING_H_
#define OCTOPIPE_LOGGING_LOGGING_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>
#include <spdlog/sinks/sink.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octopipe::logging {

struct LogOptions {
  // Lines below this level are dropped.
  spdlog::level::level_enum level = spdlog::level::info;
  // JSON lines (for log shippers) instead of human-readable text.
  bool json = false;
  // Where lines go; null: stderr. Tests pass e.g. an spdlog ostream_sink to read them back.
  std::shared_ptr<spdlog::sinks::sink> sink;
};

// "trace", "debug", "info", "warn", "error", "critical" or "off" (as spdlog names them).
// kInvalidArgument naming the value otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view name);

// Applies `options` to every component logger, those made so far and those made later.
void Configure(const LogOptions& options);

// The logger of `component`, created on first use. Never null.
std::shared_ptr<spdlog::logger> Logger(absl::string_view component);

// A named value of a structured event: a string, number or bool.
using Field = std::pair<std::string, nlohmann::json>;

// Logs `message` with `fields`: as key=value pairs after the message in text, as keys of the
// object in JSON.
void Event(spdlog::logger& logger, spdlog::level::level_enum level, absl::string_view message,
           const std::vector<Field>& fields);

// A client-supplied text (an id, an error echoing one) as it may appear in a log line or an
// error: whole up to 64 bytes, else its first 64 bytes and its length ("abc...(10000 bytes)"),
// so one call cannot write a huge line or an error over gRPC's metadata limit.
std::string Abbreviated(const std::string& text);

}  // namespace octopipe::logging

#endif  // OCTOPIPE_LOGGING_LOGGING_H_

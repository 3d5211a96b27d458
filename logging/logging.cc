#include "logging/logging.h"

#include <atomic>
#include <map>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/json_text.h"

namespace octopipe::logging {
namespace {

// The fields of the Event being logged on this thread. Loggers are synchronous, so the sink's
// formatter runs on the thread that called Event, while this points at its fields.
thread_local const std::vector<Field>* current_fields = nullptr;

std::string FormatTime(spdlog::log_clock::time_point time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(time), absl::UTCTimeZone());
}

absl::string_view LevelName(spdlog::level::level_enum level) {
  const spdlog::string_view_t name = spdlog::level::to_string_view(level);
  return absl::string_view(name.data(), name.size());
}

// One JSON object per line: time, level, logger, msg, then the event's fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    Json line;
    line["time"] = FormatTime(msg.time);
    line["level"] = std::string(LevelName(msg.level));
    line["logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
    line["msg"] = std::string(msg.payload.data(), msg.payload.size());
    if (current_fields != nullptr) {
      for (const Field& field : *current_fields) line[field.first] = field.second;
    }
    const std::string text = JsonText(line) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// A field's value in text: strings as they are unless they need quotes, numbers as JSON.
std::string TextValue(const nlohmann::json& value) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    const bool plain = !s.empty() && s.find_first_of(" \t\n\"=") == std::string::npos;
    return plain ? s : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return value.dump();
}

struct Factory {
  std::atomic<bool> json{false};  // options.json, read by every Event without the lock
  absl::Mutex mu;
  LogOptions options ABSL_GUARDED_BY(mu);
  std::shared_ptr<spdlog::sinks::sink> sink ABSL_GUARDED_BY(mu);
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers ABSL_GUARDED_BY(mu);
};

Factory& TheFactory() {
  static auto* factory = new Factory();
  return *factory;
}

std::shared_ptr<spdlog::sinks::sink> MakeSink(const LogOptions& options) {
  std::shared_ptr<spdlog::sinks::sink> sink =
      options.sink ? options.sink : std::make_shared<spdlog::sinks::stderr_sink_mt>();
  if (options.json) {
    sink->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "%Y-%m-%dT%H:%M:%S.%eZ %-5l [%n] %v", spdlog::pattern_time_type::utc));
  }
  return sink;
}

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (int i = spdlog::level::trace; i < spdlog::level::n_levels; ++i) {
    const auto level = static_cast<spdlog::level::level_enum>(i);
    if (lower == LevelName(level) || (level == spdlog::level::warn && lower == "warn")) {
      return level;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level: '", name,
                   "' is not one of trace, debug, info, warn, error, critical, off"));
}

void Configure(const LogOptions& options) {
  Factory& f = TheFactory();
  absl::MutexLock lock(&f.mu);
  f.options = options;
  f.json.store(options.json, std::memory_order_relaxed);
  f.sink = MakeSink(options);
  for (auto& [name, logger] : f.loggers) {
    logger->sinks() = {f.sink};
    logger->set_level(options.level);
  }
}

std::shared_ptr<spdlog::logger> Logger(absl::string_view component) {
  Factory& f = TheFactory();
  absl::MutexLock lock(&f.mu);
  auto it = f.loggers.find(component);
  if (it != f.loggers.end()) return it->second;
  if (!f.sink) f.sink = MakeSink(f.options);
  auto logger = std::make_shared<spdlog::logger>(std::string(component), f.sink);
  logger->set_level(f.options.level);
  f.loggers.emplace(std::string(component), logger);
  return logger;
}

void Event(spdlog::logger& logger, spdlog::level::level_enum level, absl::string_view message,
           const std::vector<Field>& fields) {
  if (!logger.should_log(level)) return;
  if (TheFactory().json.load(std::memory_order_relaxed)) {
    // The JSON formatter reads the fields from current_fields and keeps the message bare.
    const std::vector<Field>* saved = current_fields;
    current_fields = &fields;
    logger.log(level, spdlog::string_view_t(message.data(), message.size()));
    current_fields = saved;
    return;
  }
  std::string text(message);
  for (const Field& field : fields) {
    absl::StrAppend(&text, " ", field.first, "=", TextValue(field.second));
  }
  logger.log(level, text);
}

std::string Abbreviated(const std::string& text) {
  constexpr size_t kMax = 64;
  return text.size() <= kMax ? text
                             : absl::StrCat(text.substr(0, kMax), "...(", text.size(), " bytes)");
}

}  // namespace octopipe::logging

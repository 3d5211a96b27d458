#include "core/clock.h"

#include <chrono>

namespace octopipe {

Clock::~Clock() = default;

double RealClock::NowSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const Clock& RealClock::Default() {
  static const RealClock* const clock = new RealClock();
  return *clock;
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace octopipe

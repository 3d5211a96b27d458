// ReportPacer: when an agent sends its accumulated stage times to the planner. A report is due
// after every `every_iterations` measured iterations *and* at least `min_interval_s` after the
// previous one, so sub-millisecond iterations do not turn into hundreds of reports per second per
// node; the times measured meanwhile keep accumulating into the next report, so nothing is lost.
// The first report is due as soon as the iteration condition holds. Times are the caller's clock
// (seconds). Not thread-safe.
#ifndef OCTOPIPE_WORKER_AGENT_REPORT_PACER_H_
#define OCTOPIPE_WORKER_AGENT_REPORT_PACER_H_

namespace octopipe::agent {

class ReportPacer {
 public:
  // every_iterations <= 0: never due (reports off); min_interval_s <= 0: by iterations only.
  ReportPacer(int every_iterations, double min_interval_s)
      : every_(every_iterations), min_interval_s_(min_interval_s) {}

  // After a measured iteration (1, 2, ... of the run): whether to report now. When it says yes
  // the report counts as sent at `now_s`.
  bool Due(int measured_iterations, double now_s) {
    if (every_ <= 0 || measured_iterations < 1) return false;
    ++since_;
    if (since_ < every_) return false;
    if (sent_ && now_s - last_s_ < min_interval_s_) return false;
    since_ = 0;
    sent_ = true;
    last_s_ = now_s;
    return true;
  }
  // A new run starts counting afresh (the interval since the last report still holds).
  void Restart() { since_ = 0; }

 private:
  const int every_;
  const double min_interval_s_;
  int since_ = 0;
  bool sent_ = false;
  double last_s_ = 0;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_REPORT_PACER_H_

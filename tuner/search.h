// The tuner's search state and its improvement phases (internal to //tuner: tuner.cc runs
// them; not a public API). A Search scores candidates (in parallel over its workers), keeps the
// best, the fastest and the closest-to-fitting candidates and the current point of the local
// search, and knows when the time budget is spent. Each phase tries moves from the current
// candidate and returns whether it improved.
#ifndef OCTOPIPE_TUNER_SEARCH_H_
#define OCTOPIPE_TUNER_SEARCH_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "simulator/problem_builder.h"
#include "tuner/candidate.h"
#include "tuner/constraints.h"
#include "tuner/tuner.h"

namespace octopipe::tuner_internal {

constexpr double kInf = std::numeric_limits<double>::infinity();

class Search {
 public:
  Search(const ProblemBuilder& builder, const TunerOptions& o, std::function<double()> now,
         double start, const ClassicOrders* classic)
      : builder_(builder), options_(o), now_(std::move(now)), start_(start), rng_(o.seed),
        stop_([this] { return out_of_time(); }) {
    const int threads = std::max(1, o.threads);
    for (int i = 0; i < threads; ++i) {
      workers_.push_back(std::make_unique<CandidateEvaluator>(builder, o.num_microbatches,
                                                              o.link_contention, classic));
    }
  }
  Search(const Search&) = delete;  // stop_ refers to this object
  Search& operator=(const Search&) = delete;

  double elapsed() const { return now_() - start_; }
  // Stops searching at 90% of the budget so the final plan construction and full evaluation
  // still fit in it.
  bool out_of_time() const {
    return elapsed() >= stop_fraction_ * options_.time_budget_s ||
           (options_.should_stop && options_.should_stop());
  }
  // The fraction of the budget after which out_of_time() holds (0.9 unless a phase keeps some
  // of the budget for a later one).
  void set_stop_fraction(double f) { stop_fraction_ = f; }
  bool steady() const { return options_.objective == Objective::kSteadyState; }
  uint64_t seed() const { return options_.seed; }
  bool split_schedules() const { return options_.split_schedules; }
  int64_t evaluations() const { return evaluations_; }
  std::mt19937_64& rng() { return rng_; }

  // Scores every candidate; parallel over the workers, results in input order.
  std::vector<Score> EvaluateAll(const std::vector<Candidate>& requested) {
    // Executor constraints: each candidate projected onto them; one they rule out is not
    // scored (Score{} never wins).
    std::vector<Candidate> constrained;
    std::vector<char> admitted;
    if (options_.constraints.any()) {
      constrained = requested;
      admitted.resize(constrained.size());
      for (size_t i = 0; i < constrained.size(); ++i) {
        admitted[i] = ApplyConstraints(options_.constraints, &constrained[i]) ? 1 : 0;
      }
    }
    const std::vector<Candidate>& cands = admitted.empty() ? requested : constrained;
    std::vector<Score> scores(cands.size());
    const int T = static_cast<int>(workers_.size());
    // A batch may be long (thousands of seeds on a big pipeline): past the budget the rest
    // stays unscored (Score{} never wins), so the deadline bounds the batch too. One evaluation
    // may be long as well (millions of ops): it polls the same condition and is left unscored
    // when it fires.
    auto run_strided = [&](int t, int stride) {
      int done = 0;
      for (size_t i = t; i < cands.size(); i += stride) {
        if (done++ % 8 == 0 && out_of_time()) break;
        if (!admitted.empty() && !admitted[i]) continue;
        scores[i] = workers_[t]->Evaluate(cands[i], nullptr, &stop_);
      }
    };
    auto run = [&](int t) { run_strided(t, T); };
    if (T == 1 || cands.size() < 4) {
      run_strided(0, 1);
    } else {
      std::vector<std::thread> threads;
      for (int t = 1; t < T; ++t) threads.emplace_back(run, t);
      run(0);
      for (std::thread& th : threads) th.join();
    }
    evaluations_ += static_cast<int64_t>(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) Offer(cands[i], scores[i]);
    return scores;
  }

  // Keeps the best fitting candidate, the fastest one ignoring memory, and the one closest to
  // fitting. Ties keep the earlier candidate, so results do not depend on thread timing.
  void Offer(const Candidate& c, const Score& s) {
    const double obj = s.objective(steady());
    if (obj < best_score_.objective(steady())) {
      best_ = c;
      best_score_ = s;
    }
    if (obj < current_objective_) {
      // The phases move around it without the polish (justification, critical-path swaps),
      // which costs up to hundreds of evaluations per move; its objective stays the polished
      // one, the bar a move must clear.
      current_ = c;
      current_.policy.justify = false;
      current_.policy.swap_steps = 0;
      current_objective_ = obj;
    }
    const double t = steady() ? s.steady_state_iteration_time_s : s.iteration_time_s;
    if (s.scheduled && t < fastest_time_) {
      fastest_ = c;
      fastest_time_ = t;
    }
    if (!s.fits && (s.scheduled || s.memory_overflow_bytes > 0) &&
        s.memory_overflow_bytes < least_overflow_) {
      least_overflow_ = s.memory_overflow_bytes;
      closest_ = c;
    }
  }

  bool has_best() const { return best_score_.fits; }
  // The local search's incumbent: phases move around it; a restart replaces it, while the
  // global best above only ever improves.
  bool has_current() const { return current_objective_ < kInf; }
  const Candidate& current() const { return current_; }
  double current_objective() const { return current_objective_; }
  void Restart(const Candidate& c, double objective) {
    current_ = c;
    current_.policy.justify = false;  // as in Offer
    current_.policy.swap_steps = 0;
    current_objective_ = objective;
  }
  const Candidate& best() const { return best_; }
  double best_objective() const { return best_score_.objective(steady()); }
  bool has_fastest() const { return fastest_time_ < kInf; }
  const Candidate& fastest() const { return fastest_; }
  bool has_closest() const { return least_overflow_ < kInf; }
  const Candidate& closest() const { return closest_; }
  CandidateEvaluator& evaluator() { return *workers_[0]; }
  // out_of_time() as a stop check for an evaluation inside a phase (EvalOptions::should_stop).
  const std::function<bool()>* stop_check() const { return &stop_; }

  void Log(TuneResult* r, const std::string& phase, double before, int64_t evals_before,
           const std::string& detail) {
    TuneLogEntry e;
    e.phase = phase;
    e.before_s = before;
    e.after_s = best_objective();
    e.evaluations = evaluations_ - evals_before;
    e.wall_s = elapsed();
    e.detail = detail;
    r->log.push_back(e);
    if (options_.progress) options_.progress(e);
  }

 private:
  const ProblemBuilder& builder_;
  const TunerOptions& options_;
  std::function<double()> now_;
  double start_;
  double stop_fraction_ = 0.9;
  std::mt19937_64 rng_;
  const std::function<bool()> stop_;  // out_of_time(), polled inside long evaluations
  std::vector<std::unique_ptr<CandidateEvaluator>> workers_;
  int64_t evaluations_ = 0;
  Candidate best_, fastest_, closest_, current_;
  double current_objective_ = kInf;
  Score best_score_;
  double fastest_time_ = kInf;
  double least_overflow_ = kInf;
};


// Number of (partition, placement) pairs over every stage count: sum_S C(L-1, S-1) P^S,
// saturating at `cap`.
int64_t SpaceSize(int L, int P, int64_t cap);
// Every partition and placement with each seed policy (small spaces only).
void Exhaustive(Search& search, const ProblemBuilder& b, const std::vector<Policy>& policies);
// Local-search phases from the search's current candidate; true when it improved.
bool PartitionPhase(Search& search, const ProblemBuilder& b);
bool PlacementPhase(Search& search, const ProblemBuilder& b);
bool RebalancePhase(Search& search, const ProblemBuilder& b);
bool SchedulePhase(Search& search, int trials);
// A random neighbour of a scheduling policy.
// `feed`: also draw feed-bonus weights (TunerOptions::split_schedules).
Policy Perturb(const Policy& p, std::mt19937_64& rng, bool feed = false);

}  // namespace octopipe::tuner_internal

#endif  // OCTOPIPE_TUNER_SEARCH_H_

#include "simulator/critical_swap.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simulator/evaluator.h"

namespace octopipe {
namespace {

uint64_t Key(const Op& op) {
  return (static_cast<uint64_t>(op.kind) << 56) |
         (static_cast<uint64_t>(static_cast<uint32_t>(op.stage)) << 28) |
         static_cast<uint64_t>(static_cast<uint32_t>(op.microbatch));
}

// Two ops of one micro-batch always depend on each other one way or the other, except a weight
// gradient W(s) and a backward piece of a lower stage (which does not wait for W(s)).
bool SameMicrobatchChain(const Op& a, const Op& b) {
  if (a.microbatch != b.microbatch) return false;
  const bool aw = a.kind == OpKind::kW || a.kind == OpKind::kT;
  const bool bw = b.kind == OpKind::kW || b.kind == OpKind::kT;
  return !aw && !bw;
}

struct Move {
  int device = 0;
  int pos = 0;  // swaps ops[device][pos] and ops[device][pos + 1]
};

bool Tabu(const std::deque<std::pair<uint64_t, uint64_t>>& tabu, uint64_t a, uint64_t b) {
  for (const auto& [x, y] : tabu) {
    if ((x == a && y == b) || (x == b && y == a)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<CriticalSwapResult> CriticalSwapSearch(const PipelineProblem& problem,
                                                      const Schedule& schedule,
                                                      const CriticalSwapOptions& options) {
  Evaluator evaluator;
  absl::StatusOr<Evaluator::Summary> input = evaluator.EvaluateSummary(problem, schedule);
  if (!input.ok()) return input.status();
  CriticalSwapResult result;
  result.schedule = schedule;
  result.input_time_s = input->iteration_time_s;
  result.iteration_time_s = input->iteration_time_s;
  const double steady_cap = input->steady_state_iteration_time_s * (1 + 1e-12);
  const bool need_fit = options.keep_memory_fit && input->fits_memory;

  Schedule cur = schedule;
  std::deque<std::pair<uint64_t, uint64_t>> tabu;
  std::vector<std::unordered_map<uint64_t, int>> position(cur.ops.size());
  EvalOptions with_path;
  with_path.critical_path = true;
  for (int step = 0; step < options.max_iterations; ++step) {
    if (options.should_stop != nullptr && (*options.should_stop)()) break;
    absl::StatusOr<SimResult> sim = evaluator.Evaluate(problem, cur, with_path);
    if (!sim.ok()) return sim.status();
    for (size_t d = 0; d < cur.ops.size(); ++d) {
      position[d].clear();
      for (size_t i = 0; i < cur.ops[d].size(); ++i) position[d][Key(cur.ops[d][i])] = static_cast<int>(i);
    }
    // Blocks: runs of path entries on one device, adjacent in its order.
    std::vector<Move> moves;
    const std::vector<CriticalPathEntry>& path = sim->critical_path;
    size_t begin = 0;
    auto close_block = [&](size_t first, size_t last) {  // path[first..last], one block
      if (last <= first) return;
      const int d = path[first].device;
      const int p_first = position[d][Key(path[first].op)];
      const int p_last = position[d][Key(path[last].op)];
      moves.push_back({d, p_first});
      if (p_last - 1 != p_first) moves.push_back({d, p_last - 1});
    };
    for (size_t i = 1; i <= path.size(); ++i) {
      const bool same = i < path.size() && path[i].device == path[i - 1].device &&
                        position[path[i].device][Key(path[i].op)] ==
                            position[path[i].device][Key(path[i - 1].op)] + 1;
      if (!same) {
        close_block(begin, i - 1);
        begin = i;
      }
    }
    double best_time = std::numeric_limits<double>::infinity();
    int best_move = -1;
    bool best_keepable = false;
    for (size_t k = 0; k < moves.size(); ++k) {
      std::vector<Op>& ops = cur.ops[moves[k].device];
      const int p = moves[k].pos;
      if (SameMicrobatchChain(ops[p], ops[p + 1])) continue;
      const uint64_t a = Key(ops[p]), b = Key(ops[p + 1]);
      std::swap(ops[p], ops[p + 1]);
      absl::StatusOr<Evaluator::Summary> s = evaluator.EvaluateSummary(problem, cur);
      std::swap(ops[p], ops[p + 1]);
      ++result.evaluations;
      if (!s.ok() || (need_fit && !s->fits_memory)) continue;  // a cycle, or over memory
      const bool keepable = s->steady_state_iteration_time_s <= steady_cap;
      const bool aspiration = keepable && s->iteration_time_s < result.iteration_time_s;
      if (Tabu(tabu, a, b) && !aspiration) continue;
      if (s->iteration_time_s < best_time) {
        best_time = s->iteration_time_s;
        best_move = static_cast<int>(k);
        best_keepable = keepable;
      }
    }
    if (best_move < 0) break;  // every move is a cycle, over memory or forbidden
    std::vector<Op>& ops = cur.ops[moves[best_move].device];
    const int p = moves[best_move].pos;
    tabu.emplace_back(Key(ops[p]), Key(ops[p + 1]));
    while (static_cast<int>(tabu.size()) > options.tabu_tenure) tabu.pop_front();
    std::swap(ops[p], ops[p + 1]);
    ++result.iterations;
    if (best_keepable && best_time < result.iteration_time_s * (1 - 1e-12)) {
      result.iteration_time_s = best_time;
      result.schedule = cur;
      ++result.improvements;
    }
  }
  return result;
}

}  // namespace octopipe

#include "simulator/list_scheduler.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <queue>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace octopipe {
namespace {

constexpr int kF = static_cast<int>(OpKind::kF);
constexpr int kB = static_cast<int>(OpKind::kB);
constexpr int kW = static_cast<int>(OpKind::kW);
constexpr int kBW = static_cast<int>(OpKind::kBW);
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

double WeightedPolicy::Priority(const PipelineProblem& problem, const Op& op, double ready_s,
                                const DeviceState& state) const {
  (void)problem;
  (void)state;
  return kind_weight[static_cast<int>(op.kind)] - microbatch_weight * op.microbatch +
         stage_weight * op.stage - age_weight * ready_s;
}

absl::StatusOr<ListScheduleResult> ListSchedule(const PipelineProblem& pb, const SchedulePolicy& policy,
                                      const ListSchedulerOptions& options) {
  const int P = pb.num_devices, S = pb.num_stages, M = pb.num_microbatches;
  if (P <= 0 || S <= 0 || M <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("list scheduler: devices (", P,
                                                   "), stages (", S, ") and micro-batches (",
                                                   M, ") must all be > 0"));
  }
  for (const auto& [name, size] : {std::pair{"activation_cap_bytes", options.activation_cap_bytes.size()},
                                    std::pair{"inflight_cap", options.inflight_cap.size()}}) {
    if (size != 0 && size != static_cast<size_t>(P)) {
      return absl::InvalidArgumentError(absl::StrCat("list scheduler: ", name, " has ", size,
                                                     " entries for ", P, " devices"));
    }
  }
  const bool split = options.split_backward;
  const int back_kind = split ? kB : kBW;
  auto id_of = [&](int kind, int s, int m) { return (kind * S + s) * M + m; };
  const size_t num_ids = static_cast<size_t>(kNumOpKinds) * S * M;
  std::vector<int8_t> pending(num_ids, 0);
  std::vector<double> ready(num_ids, 0.0);
  std::vector<double> end(num_ids, 0.0);
  std::vector<std::vector<int32_t>> available(P);
  for (int s = 0; s < S; ++s) {
    for (int m = 0; m < M; ++m) {
      pending[id_of(kF, s, m)] = s > 0 ? 1 : 0;
      pending[id_of(back_kind, s, m)] = 1;
      if (split) pending[id_of(kW, s, m)] = 1;
      // Micro-batches enter stage 0 in order (they are interchangeable there): only the next
      // one is ever available, which keeps the first device's ready list short.
      if (s == 0 && m == 0) available[pb.stage_device[0]].push_back(id_of(kF, 0, 0));
    }
  }
  std::vector<double> free_at(P, 0.0), live(P, 0.0);
  std::vector<int> inflight(P, 0);
  ListScheduleResult result;
  Schedule& out = result.schedule;
  out.ops.resize(P);
  double makespan = 0;
  const size_t total = static_cast<size_t>(S) * M * (split ? 3 : 2);
  size_t emitted = 0;

  // In-flight caps are a heuristic budget, not a hard limit: when every device is blocked by
  // them (e.g. a device holding the first and the last stage has filled its budget with
  // early micro-batches before the first one comes back), one op is let through.
  bool relax_inflight = false;
  auto cap_ok = [&](int d, int32_t id) {
    const int kind = id / (S * M);
    if (kind != kF) return true;  // backward work always proceeds: it frees memory
    const int s = (id / M) % S;
    if (!relax_inflight && !options.inflight_cap.empty() &&
        inflight[d] >= options.inflight_cap[d]) {
      return false;
    }
    if (!options.activation_cap_bytes.empty()) {
      const double alloc = pb.recompute[s] ? pb.input_bytes[s] : pb.activation_bytes[s];
      if (live[d] + alloc > options.activation_cap_bytes[d] * (1 + 1e-12)) return false;
    }
    return true;
  };
  std::vector<int> touched;  // devices whose ready set grew during this step
  // Ready W ops queue per stage with only the oldest in the ready list: ZeroBubble-style orders
  // defer W, and scanning a long tail of interchangeable W ops at every step would make the
  // scheduler O(ops x M).
  std::vector<std::deque<int32_t>> w_waiting(S);
  std::vector<uint8_t> w_listed(S, 0);
  auto release = [&](int32_t c, double t) {
    ready[c] = std::max(ready[c], t);
    if (--pending[c] == 0) {
      const int st = (c / M) % S;
      const int dev = pb.stage_device[st];
      if (c / (S * M) == kW) {
        if (w_listed[st]) {
          w_waiting[st].push_back(c);
          return;
        }
        w_listed[st] = 1;
      }
      available[dev].push_back(c);
      touched.push_back(dev);
    }
  };

  // Each device's earliest possible start (free time vs. its ready ops that fit), kept in a
  // min-heap with lazy deletion, so a step costs O(ready ops on one device + log P).
  std::vector<double> key(P, kInf);
  std::vector<uint32_t> version(P, 0);
  using Entry = std::tuple<double, int, uint32_t>;  // (key, device, version)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto refresh = [&](int d) {
    double k = kInf;
    for (int32_t id : available[d]) {
      if (cap_ok(d, id)) k = std::min(k, std::max(free_at[d], ready[id]));
    }
    key[d] = k;
    ++version[d];
    if (k < kInf) heap.push(Entry{k, d, version[d]});
  };
  touched.clear();
  for (int d = 0; d < P; ++d) refresh(d);

  while (emitted < total) {
    int best_d = -1;
    double best_t = kInf;
    while (!heap.empty()) {
      const auto [k, d, v] = heap.top();
      heap.pop();
      if (v != version[d]) continue;
      best_d = d;
      best_t = k;
      break;
    }
    if (best_d < 0 && !relax_inflight && !options.inflight_cap.empty()) {
      relax_inflight = true;
      for (int d = 0; d < P; ++d) refresh(d);
      continue;
    }
    if (best_d < 0) {
      for (int d = 0; d < P; ++d) {
        if (!available[d].empty()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "list scheduler: device ", d, " cannot start any ready op within its memory cap (",
              options.inflight_cap.empty() ? std::string("no in-flight cap")
                                           : absl::StrCat("in-flight cap ",
                                                          options.inflight_cap[d]),
              options.activation_cap_bytes.empty()
                  ? std::string()
                  : absl::StrCat(", activation cap ", options.activation_cap_bytes[d], " bytes"),
              ") and no other device can make progress"));
        }
      }
      return absl::InternalError("list scheduler: no op is available");
    }
    const int d = best_d;
    const double t = best_t;
    DeviceState state{d, t, live[d], inflight[d]};
    size_t pick = available[d].size();
    double pick_priority = -kInf;
    for (size_t i = 0; i < available[d].size(); ++i) {
      const int32_t id = available[d][i];
      if (ready[id] > t || !cap_ok(d, id)) continue;
      const Op op{static_cast<OpKind>(id / (S * M)), (id / M) % S, id % M};
      const double pr = policy.Priority(pb, op, ready[id], state);
      if (pick == available[d].size() || pr > pick_priority ||
          (pr == pick_priority && id < available[d][pick])) {
        pick = i;
        pick_priority = pr;
      }
    }
    const int32_t id = available[d][pick];
    available[d][pick] = available[d].back();
    available[d].pop_back();
    const int kind = id / (S * M);
    const int s = (id / M) % S;
    const int m = id % M;
    double start = t;
    if ((kind == kB || kind == kBW) && pb.recompute[s]) {
      // R needs only its own F, done long before, so it runs as soon as the device is free
      // (filling any wait for the gradient); B follows it and its upstream gradient.
      out.ops[d].push_back(Op{OpKind::kR, s, m});
      live[d] += pb.activation_bytes[s] - pb.input_bytes[s];
      start = std::max(t, free_at[d] + pb.recompute_s[s]);
    }
    out.ops[d].push_back(Op{static_cast<OpKind>(kind), s, m});
    ++emitted;
    double dur = 0;
    switch (kind) {
      case kF:
        dur = pb.forward_s[s];
        live[d] += pb.recompute[s] ? pb.input_bytes[s] : pb.activation_bytes[s];
        ++inflight[d];
        break;
      case kB:
        dur = pb.backward_input_s[s];
        live[d] -= pb.activation_bytes[s] - pb.activation_bytes_w[s];
        if (options.inflight_until_b) --inflight[d];
        break;
      case kW:
        if (w_waiting[s].empty()) {
          w_listed[s] = 0;
        } else {
          available[d].push_back(w_waiting[s].front());
          w_waiting[s].pop_front();
        }
        dur = pb.weight_grad_s[s];
        live[d] -= pb.activation_bytes_w[s];
        if (!options.inflight_until_b) --inflight[d];
        break;
      default:  // BW
        dur = pb.backward_input_s[s] + pb.weight_grad_s[s];
        live[d] -= pb.activation_bytes[s];
        --inflight[d];
        break;
    }
    const double finish = start + dur;
    end[id] = finish;
    free_at[d] = finish;
    makespan = std::max(makespan, finish);
    // Successors.
    auto cross = [&](int to_stage, double bytes) {
      const int a = pb.stage_device[s], b = pb.stage_device[to_stage];
      return a == b ? finish : finish + pb.transfer_s(a, b, bytes);
    };
    if (kind == kF) {
      if (s == 0 && m + 1 < M) {
        available[d].push_back(id_of(kF, 0, m + 1));  // ready from the start
      }
      if (s + 1 < S) {
        release(id_of(kF, s + 1, m), cross(s + 1, pb.output_bytes[s]));
      } else {
        release(id_of(back_kind, s, m), finish);
      }
    } else if (kind == kB || kind == kBW) {
      if (s > 0) release(id_of(back_kind, s - 1, m), cross(s - 1, pb.output_bytes[s - 1]));
      if (kind == kB) release(id_of(kW, s, m), finish);
    }
    if (relax_inflight) {
      relax_inflight = false;
      for (int dev = 0; dev < P; ++dev) refresh(dev);
    } else {
      refresh(d);
      for (int dev : touched) {
        if (dev != d) refresh(dev);
      }
    }
    touched.clear();
  }
  result.iteration_time_s = makespan;  // F of stage 0, micro-batch 0 starts at time 0
  return result;
}

}  // namespace octopipe

#include "simulator/schedules.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/problem.h"
#include "simulator/zb_schedules.h"

namespace octopipe {
namespace {

struct KindName {
  ScheduleKind kind;
  const char* name;
};
constexpr KindName kNames[] = {
    {ScheduleKind::kGpipe, "gpipe"},     {ScheduleKind::k1F1B, "1f1b"},
    {ScheduleKind::kInterleaved, "interleaved"}, {ScheduleKind::kZbH1, "zb-h1"},
    {ScheduleKind::kZbH2, "zb-h2"},      {ScheduleKind::kZbV, "zb-v"},
    {ScheduleKind::kDualPipeV, "dualpipev"},
};

Op F(int s, int m) { return Op{OpKind::kF, s, m}; }
Op BW(int s, int m) { return Op{OpKind::kBW, s, m}; }

Schedule Gpipe(int P, int M) {
  Schedule sch;
  sch.ops.resize(P);
  for (int d = 0; d < P; ++d) {
    for (int m = 0; m < M; ++m) sch.ops[d].push_back(F(d, m));
    for (int m = 0; m < M; ++m) sch.ops[d].push_back(BW(d, m));
  }
  return sch;
}

Schedule OneFOneB(int P, int M) {
  Schedule sch;
  sch.ops.resize(P);
  for (int d = 0; d < P; ++d) {
    auto& ops = sch.ops[d];
    const int warmup = std::min(P - d - 1, M);
    for (int m = 0; m < warmup; ++m) ops.push_back(F(d, m));
    for (int i = 0; i < M - warmup; ++i) {
      ops.push_back(F(d, warmup + i));
      ops.push_back(BW(d, i));
    }
    for (int m = M - warmup; m < M; ++m) ops.push_back(BW(d, m));
  }
  return sch;
}

// Megatron-LM's interleaved order (megatron/core/pipeline_parallel/schedules.py): micro-batches
// in groups of N (the smallest group size Megatron accepts, see InterleavedGroupSize), each group
// through every chunk (forward: chunks ascending; backward: descending), the last group taking
// the remainder; warm-up (P - d - 1) * 2 + (V - 1) * N, 1F1B after it.
Schedule Interleaved(int P, int V, int M) {
  Schedule sch;
  sch.ops.resize(P);
  const int N = InterleavedGroupSize(P, M);
  std::vector<std::pair<int, int>> fwd, bwd;  // (chunk, micro-batch)
  for (int g = 0; g < M; g += N) {
    const int end = g + N >= M ? M : g + N;  // Megatron: the last group runs to M
    for (int c = 0; c < V; ++c) {
      for (int m = g; m < end; ++m) fwd.push_back({c, m});
    }
    for (int c = V - 1; c >= 0; --c) {
      for (int m = g; m < end; ++m) bwd.push_back({c, m});
    }
    if (end == M) break;
  }
  const int total = V * M;
  for (int d = 0; d < P; ++d) {
    auto& ops = sch.ops[d];
    const int warmup = std::min((P - d - 1) * 2 + (V - 1) * N, total);
    for (int k = 0; k < warmup; ++k) ops.push_back(F(fwd[k].first * P + d, fwd[k].second));
    for (int k = 0; k < total - warmup; ++k) {
      ops.push_back(F(fwd[warmup + k].first * P + d, fwd[warmup + k].second));
      ops.push_back(BW(bwd[k].first * P + d, bwd[k].second));
    }
    for (int k = total - warmup; k < total; ++k) {
      ops.push_back(BW(bwd[k].first * P + d, bwd[k].second));
    }
  }
  return sch;
}

// DualPipeV (DeepSeek DualPipe repository, dualpipev.py): eight steps per rank; chunk 0 is
// stage d, chunk 1 is stage 2P - 1 - d. "Zero-bubble" backwards are B with W queued (FIFO);
// the others are unsplit. Overlapped forward-backward pairs run back to back here.
Schedule DualPipeV(int P, int M) {
  Schedule sch;
  sch.ops.resize(P);
  for (int r = 0; r < P; ++r) {
    auto& ops = sch.ops[r];
    const int stage[2] = {r, 2 * P - 1 - r};
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::deque<Op> w_queue;
    auto forward = [&](int c) { ops.push_back(F(stage[c], next_f[c]++)); };
    auto backward = [&](int c, bool zb) {
      const int m = next_b[c]++;
      if (zb) {
        ops.push_back(Op{OpKind::kB, stage[c], m});
        w_queue.push_back(Op{OpKind::kW, stage[c], m});
      } else {
        ops.push_back(BW(stage[c], m));
      }
    };
    auto weight = [&]() {
      ops.push_back(w_queue.front());
      w_queue.pop_front();
    };
    for (int i = 0; i < (P - r - 1) * 2; ++i) forward(0);                 // 1: nF0
    for (int i = 0; i < r + 1; ++i) { forward(0); forward(1); }          // 2: nF0F1
    for (int i = 0; i < P - r - 1; ++i) {                                // 3: nB1W1F1
      backward(1, true);
      weight();
      forward(1);
    }
    for (int i = 0; i < M - 2 * P + r + 1; ++i) {                        // 4: nF0B1F1B0
      forward(0);
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    for (int i = 0; i < P - r - 1; ++i) {                                // 5: nB1F1B0
      backward(1, false);
      forward(1);
      backward(0, false);
    }
    bool zb = false;                                                     // 6: nB1B0
    const int step6 = r + 1;
    for (int i = 0; i < step6; ++i) {
      if (i == step6 / 2 && r % 2 == 1) zb = true;
      backward(1, zb);
      if (i == step6 / 2 && r % 2 == 0) zb = true;
      backward(0, zb);
    }
    for (int i = 0; i < P - r - 1; ++i) {                                // 7: nWB0
      weight();
      backward(0, true);
    }
    while (!w_queue.empty()) weight();                                   // 8: nW
  }
  return sch;
}

// The ZB family built for `pb` by ZeroBubble's own builders (simulator/zb_schedules.h):
// ZB-H1 and ZB-H2 with 1 and 2 x P pending activations, ZB-V with its 1F1B-sized limit.
absl::StatusOr<Schedule> ZeroBubbleFor(ScheduleKind kind, const PipelineProblem& pb) {
  absl::StatusOr<ZbScheduleResult> r = kind == ScheduleKind::kZbV ? ZeroBubbleV(pb)
                                       : ZeroBubbleH(pb, kind == ScheduleKind::kZbH1 ? 1 : 2);
  if (!r.ok()) return r.status();
  return std::move(r->schedule);
}

// The same at unit costs (F = B = W = 1, no transfer time, one activation unit per
// micro-batch), whose orders give the papers' closed forms.
absl::StatusOr<Schedule> ZeroBubbleUnit(ScheduleKind kind, int P, int M,
                                        const std::vector<int>& placement) {
  const PipelineProblem pb = UniformProblem(placement, P, M, 1.0, 1.0, 1.0);
  return ZeroBubbleFor(kind, pb);
}

}  // namespace

absl::string_view ScheduleKindName(ScheduleKind kind) {
  for (const KindName& k : kNames) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name) {
  for (const KindName& k : kNames) {
    if (name == k.name) return k.kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown schedule '", name,
      "' (valid: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev)"));
}

std::vector<ScheduleKind> AllScheduleKinds() {
  std::vector<ScheduleKind> out;
  for (const KindName& k : kNames) out.push_back(k.kind);
  return out;
}

int DefaultChunks(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kInterleaved:
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV: return 2;
    default: return 1;
  }
}

bool SplitsBackward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbH2 ||
         kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV;
}

bool BuiltForCosts(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbH2 || kind == ScheduleKind::kZbV;
}

int InterleavedGroupSize(int devices, int microbatches) {
  for (int n = devices; n < microbatches; ++n) {
    const int rest = microbatches % n;
    if (rest == 0 || rest >= devices) return n;
  }
  return std::max(devices, microbatches);
}

absl::StatusOr<Schedule> ScheduleForProblem(ScheduleKind kind, int chunks,
                                            const PipelineProblem& problem) {
  if (BuiltForCosts(kind)) return ZeroBubbleFor(kind, problem);
  ASSIGN_OR_RETURN(GeneratedSchedule g, GenerateSchedule(kind, problem.num_devices, chunks,
                                                         problem.num_microbatches));
  if (g.stage_device != problem.stage_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage_device: the problem's placement is not ", ScheduleKindName(kind), "'s"));
  }
  return std::move(g.schedule);
}

std::vector<int> LoopPlacement(int devices, int chunks) {
  std::vector<int> out(static_cast<size_t>(devices) * chunks);
  for (size_t s = 0; s < out.size(); ++s) out[s] = static_cast<int>(s % devices);
  return out;
}

std::vector<int> VShapePlacement(int devices) {
  std::vector<int> out(2 * devices);
  for (int s = 0; s < 2 * devices; ++s) out[s] = s < devices ? s : 2 * devices - 1 - s;
  return out;
}

absl::StatusOr<GeneratedSchedule> GenerateSchedule(ScheduleKind kind, int devices, int chunks,
                                                   int microbatches) {
  const std::string name(ScheduleKindName(kind));
  if (devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("devices must be >= 1, got ", devices));
  }
  if (microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches must be >= 1, got ", microbatches));
  }
  if (chunks == 0) chunks = DefaultChunks(kind);
  const bool fixed = kind != ScheduleKind::kInterleaved;
  if (chunks < 1 || (fixed && chunks != DefaultChunks(kind))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunks must be ", fixed ? absl::StrCat(DefaultChunks(kind)) : std::string(">= 1"),
        " for ", name, ", got ", chunks));
  }
  if (kind == ScheduleKind::kInterleaved && chunks > 1 && microbatches < devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "microbatches must be >= devices (", devices,
        ") for interleaved with chunks > 1 (Megatron-LM's rule), got ", microbatches));
  }
  if (kind == ScheduleKind::kDualPipeV && microbatches < 2 * devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches must be >= 2 x devices (", 2 * devices, ") for dualpipev, got ",
                     microbatches));
  }
  GeneratedSchedule g;
  g.kind = kind;
  g.num_devices = devices;
  g.num_chunks = chunks;
  g.num_stages = devices * chunks;
  const bool v_shape = kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV;
  g.stage_device = v_shape ? VShapePlacement(devices) : LoopPlacement(devices, chunks);
  switch (kind) {
    case ScheduleKind::kGpipe: g.schedule = Gpipe(devices, microbatches); break;
    case ScheduleKind::k1F1B: g.schedule = OneFOneB(devices, microbatches); break;
    case ScheduleKind::kInterleaved:
      g.schedule = chunks == 1 ? OneFOneB(devices, microbatches)
                               : Interleaved(devices, chunks, microbatches);
      break;
    case ScheduleKind::kDualPipeV: g.schedule = DualPipeV(devices, microbatches); break;
    default: {
      ASSIGN_OR_RETURN(g.schedule,
                       ZeroBubbleUnit(kind, devices, microbatches, g.stage_device));
    }
  }
  return g;
}

}  // namespace octopipe

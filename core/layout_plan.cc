#include "core/layout_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace octopipe {

std::string ParallelLayout::ToString() const {
  return absl::StrCat("PP", pp, " x TP", tp, " x EP", ep, " x DP", dp,
                      pp_outer ? " (pp outer)" : " (pp inner)");
}

std::string ParallelLayout::RankOrder() const { return pp_outer ? "tp-dp-pp" : "tp-pp-dp"; }

int LayoutPlan::num_replicas() const {
  int n = 0;
  for (const LayoutPipelinePlan& p : pipelines) n += static_cast<int>(p.replicas.size());
  return n;
}

LayoutPlan SinglePipelineLayout(const Plan& plan) {
  LayoutPlan out;
  out.layout.pp = plan.num_devices;
  out.num_ranks = plan.num_devices;
  out.global_microbatches = plan.num_microbatches;
  LayoutPipelinePlan p;
  p.plan = plan;
  PipelineReplica r;
  for (int d = 0; d < plan.num_devices; ++d) r.device_ranks.push_back(d);
  p.replicas.push_back(std::move(r));
  out.pipelines.push_back(std::move(p));
  return out;
}

namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// What the pipelines' replicas claim, gathered while they are checked one by one and checked
// as a whole afterwards.
struct ReplicaClaims {
  explicit ReplicaClaims(const LayoutPlan& plan)
      : rank_owner(plan.num_ranks, -1),
        dp_seen(plan.layout.dp, 0),
        pipeline_of_dp(plan.layout.dp, -1) {}
  std::vector<int> rank_owner;  // replica index over all pipelines
  std::vector<int> dp_seen;
  std::vector<int> pipeline_of_dp;
  std::vector<std::pair<int, int>> ranges;  // [first, end) of each replica
  int max_devices = 0;
};

// The layout's degrees and the plan's counts, before any pipeline is looked at.
absl::Status CheckLayoutCounts(const LayoutPlan& plan) {
  const ParallelLayout& l = plan.layout;
  for (const auto& [name, v] :
       {std::pair<const char*, int>{"pp", l.pp}, {"tp", l.tp}, {"ep", l.ep}, {"dp", l.dp}}) {
    if (v < 1) return Bad(absl::StrCat("layout.", name), absl::StrCat(v, " must be >= 1"));
  }
  if (plan.pipelines.empty()) return Bad("pipelines", "a layout needs at least one pipeline");
  if (plan.num_ranks < 1) return Bad("num_ranks", absl::StrCat(plan.num_ranks, " must be >= 1"));
  if (plan.global_microbatches < 1) {
    return Bad("global_microbatches", absl::StrCat(plan.global_microbatches, " must be >= 1"));
  }
  if (plan.num_replicas() != l.dp) {
    return Bad("layout.dp", absl::StrCat(l.dp, " but the pipelines have ", plan.num_replicas(),
                                         " replicas in all"));
  }
  if (l.dp % l.ep != 0) {
    return Bad("layout.ep", absl::StrCat(l.ep, " does not divide dp = ", l.dp));
  }
  return absl::OkStatus();
}

// Each device's TP group of ranks is inside [0, num_ranks) and used by no other replica;
// claims them for the replica.
absl::Status ClaimDeviceRanks(const LayoutPlan& plan, const PipelineReplica& rep,
                              const std::string& rw, std::vector<int>* rank_owner) {
  const int tp = plan.layout.tp;
  for (size_t d = 0; d < rep.device_ranks.size(); ++d) {
    for (int t = 0; t < tp; ++t) {
      const int rank = rep.device_ranks[d] + t;
      if (rep.device_ranks[d] < 0 || rank >= plan.num_ranks) {
        return Bad(
            absl::StrCat(rw, ".device_ranks[", d, "]"),
            absl::StrCat("TP group ", rep.device_ranks[d], "..", rep.device_ranks[d] + tp - 1,
                         " is outside ranks [0, ", plan.num_ranks, ")"));
      }
      if ((*rank_owner)[rank] >= 0) {
        return Bad(absl::StrCat(rw, ".device_ranks[", d, "]"),
                   absl::StrCat("rank ", rank, " is already used"));
      }
      (*rank_owner)[rank] = rep.dp_rank;
    }
  }
  return absl::OkStatus();
}

// One replica (`rw` names it) of pipeline p: its dp rank, device ranks and micro-batches.
absl::Status CheckReplica(const LayoutPlan& plan, size_t p, const PipelineReplica& rep,
                          const std::string& rw, ReplicaClaims* claims) {
  const int dp = plan.layout.dp;
  const LayoutPipelinePlan& pipe = plan.pipelines[p];
  if (rep.dp_rank < 0 || rep.dp_rank >= dp) {
    return Bad(rw + ".dp_rank", absl::StrCat(rep.dp_rank, " is outside [0, ", dp, ")"));
  }
  if (claims->dp_seen[rep.dp_rank]++ > 0) {
    return Bad(rw + ".dp_rank", absl::StrCat(rep.dp_rank, " is used by another replica"));
  }
  claims->pipeline_of_dp[rep.dp_rank] = static_cast<int>(p);
  if (static_cast<int>(rep.device_ranks.size()) != pipe.plan.num_devices) {
    return Bad(rw + ".device_ranks",
               absl::StrCat(rep.device_ranks.size(), " entries for a pipeline of ",
                            pipe.plan.num_devices, " devices"));
  }
  RETURN_IF_ERROR(ClaimDeviceRanks(plan, rep, rw, &claims->rank_owner));
  const int first = rep.first_microbatch, end = first + pipe.plan.num_microbatches;
  if (first < 0 || end > plan.global_microbatches) {
    return Bad(rw + ".first_microbatch",
               absl::StrCat("micro-batches [", first, ", ", end,
                            ") are outside the global batch [0, ", plan.global_microbatches, ")"));
  }
  claims->ranges.emplace_back(first, end);
  return absl::OkStatus();
}

// Pipeline p: its plan's shape, its replicas, and a split head only where it can run.
absl::Status CheckPipeline(const LayoutPlan& plan, size_t p, int num_layers,
                           ReplicaClaims* claims) {
  const LayoutPipelinePlan& pipe = plan.pipelines[p];
  const std::string where = absl::StrCat("pipelines[", p, "]");
  if (absl::Status s = ValidatePlanShape(pipe.plan, num_layers); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".plan: ", s.message()));
  }
  if (pipe.replicas.empty()) return Bad(absl::StrCat(where, ".replicas"), "none");
  if (pipe.plan.vocab_parallel && (plan.layout.tp > 1 || plan.pipelines.size() > 1)) {
    return Bad(absl::StrCat(where, ".plan.vocab_parallel"),
               "a split head runs only with TP 1 and replicas of one pipeline");
  }
  claims->max_devices = std::max(claims->max_devices, pipe.plan.num_devices);
  for (size_t r = 0; r < pipe.replicas.size(); ++r) {
    RETURN_IF_ERROR(
        CheckReplica(plan, p, pipe.replicas[r], absl::StrCat(where, ".replicas[", r, "]"), claims));
  }
  return absl::OkStatus();
}

// The replicas' micro-batch ranges tile the global batch exactly, without gap or overlap.
absl::Status CheckMicrobatchTiling(const LayoutPlan& plan,
                                   std::vector<std::pair<int, int>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  int covered = 0;
  for (const auto& [first, end] : ranges) {
    if (first != covered) {
      return Bad(
          "pipelines[].replicas[].first_microbatch",
          absl::StrCat("the replicas' micro-batches do not tile the global batch of ",
                       plan.global_microbatches, ": ", first < covered ? "overlap at " : "gap at ",
                       std::min(first, covered)));
    }
    covered = end;
  }
  if (covered != plan.global_microbatches) {
    return Bad("global_microbatches",
               absl::StrCat(plan.global_microbatches, " but the replicas run ", covered,
                            " micro-batches in all"));
  }
  return absl::OkStatus();
}

// The replicas of one expert-parallel group (ep consecutive dp ranks) run the same pipeline.
absl::Status CheckExpertGroups(const ParallelLayout& l, const std::vector<int>& pipeline_of_dp) {
  for (int dp = 0; dp < l.dp; ++dp) {
    const int group_first = dp - dp % l.ep;
    if (pipeline_of_dp[dp] != pipeline_of_dp[group_first]) {
      return Bad("layout.ep",
                 absl::StrCat("replicas ", group_first, " and ", dp,
                              " form an expert-parallel group but run different pipelines (",
                              pipeline_of_dp[group_first], " and ", pipeline_of_dp[dp], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLayoutPlan(const LayoutPlan& plan, int num_layers) {
  const ParallelLayout& l = plan.layout;
  RETURN_IF_ERROR(CheckLayoutCounts(plan));
  ReplicaClaims claims(plan);
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    RETURN_IF_ERROR(CheckPipeline(plan, p, num_layers, &claims));
  }
  for (int rank = 0; rank < plan.num_ranks; ++rank) {
    if (claims.rank_owner[rank] < 0) {
      return Bad("num_ranks", absl::StrCat(plan.num_ranks, " ranks but rank ", rank,
                                           " is in no replica's device_ranks"));
    }
  }
  if (l.pp != claims.max_devices) {
    return Bad("layout.pp", absl::StrCat(l.pp, " but the largest pipeline has ", claims.max_devices,
                                         " devices"));
  }
  RETURN_IF_ERROR(CheckMicrobatchTiling(plan, std::move(claims.ranges)));
  return CheckExpertGroups(l, claims.pipeline_of_dp);
}

absl::Status CheckLayoutAgainstModel(const ParallelLayout& layout, const ModelGraph& model) {
  const int64_t tp = layout.tp, ep = layout.ep;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const Layer& layer = model.layers[i];
    const LayerDims& d = layer.dims;
    auto check = [&](const char* field, int64_t value, int64_t degree,
                     const char* what) -> absl::Status {
      if (degree > 1 && value > 0 && value % degree != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", degree, " does not divide layers[", i, "].dims.", field,
                         " = ", value, " (", layer.name, ")"));
      }
      return absl::OkStatus();
    };
    const char* kTp = "layout.tp (tensor parallelism)";
    switch (layer.kind) {
      case LayerKind::kAttention:
      case LayerKind::kMlaAttention:
      case LayerKind::kVisionBlock:
        RETURN_IF_ERROR(check("heads", d.heads, tp, kTp));
        RETURN_IF_ERROR(check("kv_heads", d.kv_heads, tp, kTp));
        RETURN_IF_ERROR(check("ffn", d.ffn, tp, kTp));
        break;
      case LayerKind::kMlp:
        RETURN_IF_ERROR(check("ffn", d.ffn, tp, kTp));
        break;
      case LayerKind::kMamba:
      case LayerKind::kMamba2:
        RETURN_IF_ERROR(check("hidden * expand", d.hidden * std::max<int64_t>(1, d.expand), tp,
                              kTp));
        RETURN_IF_ERROR(check("ssm_heads", d.ssm_heads, tp, kTp));
        break;
      case LayerKind::kMoe:
        RETURN_IF_ERROR(check("moe_ffn", d.moe_ffn, tp, kTp));
        RETURN_IF_ERROR(check("experts", d.experts, ep, "layout.ep (expert parallelism)"));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

std::vector<RankRole> RankRoles(const LayoutPlan& plan) {
  std::vector<RankRole> roles(plan.num_ranks);
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const LayoutPipelinePlan& pipe = plan.pipelines[p];
    for (size_t r = 0; r < pipe.replicas.size(); ++r) {
      const PipelineReplica& rep = pipe.replicas[r];
      for (size_t d = 0; d < rep.device_ranks.size(); ++d) {
        for (int t = 0; t < plan.layout.tp; ++t) {
          RankRole& role = roles[rep.device_ranks[d] + t];
          role.pipeline = static_cast<int>(p);
          role.replica = static_cast<int>(r);
          role.dp_rank = rep.dp_rank;
          role.device = static_cast<int>(d);
          role.tp_rank = t;
          role.ep_rank = rep.dp_rank % plan.layout.ep;
        }
      }
    }
  }
  return roles;
}

}  // namespace octopipe

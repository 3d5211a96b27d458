#include "executor/layout_trainer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "executor/checkpoint.h"
#include "executor/engine.h"
#include "executor/layers/expert_parallel.h"
#include "executor/layers/tensor_parallel.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"
#include "executor/reference_trainer.h"
#include "executor/sub_transport.h"

namespace octopipe::executor {
namespace {

// A slice of one layer's parameters whose gradients are summed over one DP group.
struct Bucket {
  int layer = 0;
  int first_param = 0;
  int end_param = -1;  // -1: to the last parameter
  std::string part;    // orders the buckets of one layer
  std::string group;   // the collective's name
};

// Everything every rank derives identically from the plan.
struct Setup {
  std::vector<RankRole> roles;
  std::map<std::string, std::vector<int>> groups;  // name -> member ranks, in member order
  std::vector<std::string> tp_group, ep_group;     // per rank ("" none)
  std::vector<std::vector<Bucket>> buckets;        // per rank, in the global order
  std::string loss_group;                          // "" when one replica
  std::vector<std::pair<int, int>> replica_of;     // dp rank -> (pipeline, replica index)
};

bool IsVocabSplit(const ModelSpec& spec, const Plan& plan, int layer) {
  if (!plan.vocab_parallel) return false;
  const int L = static_cast<int>(spec.kinds.size());
  return layer == L - 1 || (layer == 0 && spec.kinds.front() == "embedding");
}

// The layers rank `role` holds (sorted), vocabulary shards included.
std::vector<int> HeldLayers(const ModelSpec& spec, const LayoutPlan& plan, const RankRole& role) {
  const Plan& p = plan.pipelines[role.pipeline].plan;
  std::set<int> held;
  for (const StageAssignment& st : p.stages) {
    if (st.device != role.device) continue;
    for (int l = st.first_layer; l <= st.last_layer; ++l) held.insert(l);
  }
  for (int l : {0, static_cast<int>(spec.kinds.size()) - 1}) {
    if (IsVocabSplit(spec, p, l)) held.insert(l);
  }
  return {held.begin(), held.end()};
}

std::string GroupName(const std::string& kind, const std::vector<int>& ranks) {
  return absl::StrCat(kind, "/", absl::StrJoin(ranks, "-"));
}

// Each dp rank's (pipeline, replica index).
std::vector<std::pair<int, int>> ReplicaOf(const LayoutPlan& plan) {
  std::vector<std::pair<int, int>> replica_of(plan.layout.dp);
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    for (size_t r = 0; r < plan.pipelines[p].replicas.size(); ++r) {
      replica_of[plan.pipelines[p].replicas[r].dp_rank] = {static_cast<int>(p),
                                                           static_cast<int>(r)};
    }
  }
  return replica_of;
}

// With TP: `rank`'s TP group, the tp consecutive ranks of its device.
void AddTpGroup(const LayoutPlan& plan, const RankRole& role, int rank, Setup* s) {
  const int tp = plan.layout.tp;
  if (tp <= 1) return;
  const PipelineReplica& rep = plan.pipelines[role.pipeline].replicas[role.replica];
  std::vector<int> members;
  for (int t = 0; t < tp; ++t) members.push_back(rep.device_ranks[role.device] + t);
  s->tp_group[rank] = GroupName("tp", members);
  s->groups[s->tp_group[rank]] = members;
}

// With EP, when `rank` holds a MoE layer: its EP group, the same device and TP rank in each
// replica of its expert-parallel group of ep consecutive dp ranks.
void AddEpGroup(const ModelSpec& spec, const LayoutPlan& plan, const RankRole& role,
                const std::vector<int>& held, int rank, Setup* s) {
  const int ep = plan.layout.ep;
  const bool has_moe =
      std::any_of(held.begin(), held.end(), [&](int l) { return spec.kinds[l] == "moe"; });
  if (!(ep > 1 && has_moe)) return;
  std::vector<int> members;
  const int first = role.dp_rank - role.dp_rank % ep;
  for (int d = first; d < first + ep; ++d) {
    const auto [p, r] = s->replica_of[d];
    members.push_back(plan.pipelines[p].replicas[r].device_ranks[role.device] + role.tp_rank);
  }
  s->ep_group[rank] = GroupName("ep", members);
  s->groups[s->ep_group[rank]] = members;
}

// The buckets of the layers `held` by a rank, each with the key of the parameter shard it
// holds (the ranks holding one key sum its gradients): a MoE layer under EP splits into its
// replicated dense part and its experts, a vocabulary-split layer is its device's shard.
std::vector<std::pair<Bucket, std::string>> KeyedBuckets(const ModelSpec& spec,
                                                         const Plan& pipe_plan, int ep,
                                                         const RankRole& role,
                                                         const std::vector<int>& held) {
  std::vector<std::pair<Bucket, std::string>> keyed;
  for (int l : held) {
    auto add = [&](int first, int end, const std::string& part, const std::string& key) {
      Bucket b;
      b.layer = l;
      b.first_param = first;
      b.end_param = end;
      b.part = part;
      keyed.push_back({b, key});
    };
    if (spec.kinds[l] == "moe" && ep > 1) {
      const int dense = ParallelMoeReplicatedParams();
      add(0, dense, "a", absl::StrCat("l", l, "/t", role.tp_rank, "/dense"));
      add(dense, -1, "b", absl::StrCat("l", l, "/t", role.tp_rank, "/e", role.ep_rank));
    } else if (IsVocabSplit(spec, pipe_plan, l)) {
      add(0, -1, "a", absl::StrCat("l", l, "/shard", role.device));
    } else {
      add(0, -1, "a", absl::StrCat("l", l, "/t", role.tp_rank));
    }
  }
  return keyed;
}

// Keeps each rank's buckets whose shard two or more ranks hold, with the DP group of those
// ranks, in the global order: layers descending (the backward's order), then the part.
void AssignDpBuckets(const std::vector<std::vector<std::pair<Bucket, std::string>>>& keyed,
                     const std::map<std::string, std::vector<int>>& dp_keys, Setup* s) {
  for (size_t rank = 0; rank < keyed.size(); ++rank) {
    for (const auto& [keyed_bucket, key] : keyed[rank]) {
      const std::vector<int>& members = dp_keys.at(key);
      if (members.size() < 2) continue;
      Bucket bucket = keyed_bucket;
      bucket.group = GroupName("dp", members);
      s->groups[bucket.group] = members;
      s->buckets[rank].push_back(bucket);
    }
    std::sort(s->buckets[rank].begin(), s->buckets[rank].end(),
              [](const Bucket& a, const Bucket& b) {
                return std::tie(b.layer, a.part) < std::tie(a.layer, b.part);
              });
  }
}

Setup MakeSetup(const ModelSpec& spec, const LayoutPlan& plan) {
  Setup s;
  s.roles = RankRoles(plan);
  const int R = plan.num_ranks;
  s.tp_group.assign(R, "");
  s.ep_group.assign(R, "");
  s.buckets.assign(R, {});
  s.replica_of = ReplicaOf(plan);
  std::map<std::string, std::vector<int>> dp_keys;  // shard key -> ranks holding it
  std::vector<std::vector<std::pair<Bucket, std::string>>> keyed(R);  // bucket, its key
  std::vector<int> loss_ranks;
  for (int rank = 0; rank < R; ++rank) {
    const RankRole& role = s.roles[rank];
    const LayoutPipelinePlan& pipe = plan.pipelines[role.pipeline];
    AddTpGroup(plan, role, rank, &s);
    const std::vector<int> held = HeldLayers(spec, plan, role);
    AddEpGroup(spec, plan, role, held, rank, &s);
    keyed[rank] = KeyedBuckets(spec, pipe.plan, plan.layout.ep, role, held);
    for (const auto& [bucket, key] : keyed[rank]) dp_keys[key].push_back(rank);
    if (role.device == pipe.plan.stages.back().device && role.tp_rank == 0) {
      loss_ranks.push_back(rank);
    }
  }
  AssignDpBuckets(keyed, dp_keys, &s);
  if (loss_ranks.size() > 1) {
    s.loss_group = GroupName("loss", loss_ranks);
    s.groups[s.loss_group] = loss_ranks;
  }
  return s;
}

// The communication thread: runs this rank's buckets' all-reduces in order, each once its layer
// is ready, every iteration.
class GradientSync {
 public:
  GradientSync(std::vector<Bucket> buckets, std::map<std::string, Collective*> collectives,
               std::vector<std::unique_ptr<Layer>>* layers)
      : buckets_(std::move(buckets)), collectives_(std::move(collectives)), layers_(layers) {
    if (!buckets_.empty()) thread_ = std::thread([this] { Loop(); });
  }
  ~GradientSync() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void Begin() {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.clear();
    all_ready_ = false;
    done_ = 0;
    status_ = absl::OkStatus();
    sync_s_ = 0;
    ++iteration_;
    cv_.notify_all();
  }
  void MarkReady(int layer) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.insert(layer);
    }
    cv_.notify_all();
  }
  // Waits for every all-reduce of the iteration; the seconds waited go to *wait_s.
  absl::Status Finish(double* wait_s, double* sync_s) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    all_ready_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ == buckets_.size(); });
    *wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    *sync_s = sync_s_;
    return status_;
  }

 private:
  void Loop() {
    uint64_t seen = 0;
    std::vector<float> buffer;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return quit_ || iteration_ != seen; });
        if (quit_) return;
        seen = iteration_;
      }
      for (const Bucket& b : buckets_) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return quit_ || all_ready_ || ready_.count(b.layer) > 0; });
          if (quit_) return;
        }
        absl::Status s;
        double seconds = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          s = status_;
        }
        if (s.ok()) {
          const auto start = std::chrono::steady_clock::now();
          s = Reduce(b, &buffer);
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (status_.ok() && !s.ok()) status_ = s;
          sync_s_ += seconds;
          ++done_;
        }
        cv_.notify_all();
      }
    }
  }

  absl::Status Reduce(const Bucket& b, std::vector<float>* buffer) {
    std::vector<Tensor*> grads = (*layers_)[b.layer]->grads();
    const int end = b.end_param < 0 ? static_cast<int>(grads.size()) : b.end_param;
    size_t n = 0;
    for (int i = b.first_param; i < end; ++i) n += grads[i]->size();
    buffer->resize(n);
    size_t at = 0;
    for (int i = b.first_param; i < end; ++i) {
      std::memcpy(buffer->data() + at, grads[i]->data(), grads[i]->size() * sizeof(float));
      at += grads[i]->size();
    }
    absl::Status s = collectives_.at(b.group)->AllReduceSum(buffer->data(), n);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("gradient all-reduce of layer ", b.layer, ": ",
                                                 s.message()));
    }
    at = 0;
    for (int i = b.first_param; i < end; ++i) {
      std::memcpy(grads[i]->data(), buffer->data() + at, grads[i]->size() * sizeof(float));
      at += grads[i]->size();
    }
    return absl::OkStatus();
  }

  const std::vector<Bucket> buckets_;
  const std::map<std::string, Collective*> collectives_;
  std::vector<std::unique_ptr<Layer>>* const layers_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int> ready_;
  bool all_ready_ = false;
  bool quit_ = false;
  size_t done_ = 0;
  uint64_t iteration_ = 0;
  absl::Status status_;
  double sync_s_ = 0;
};

// The rank's layers: whole, or shards over its TP / EP groups.
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayoutLayers(
    const ModelSpec& spec, const LayoutPlan& plan, const RankRole& role, Collective* tp,
    Collective* ep) {
  const Plan& p = plan.pipelines[role.pipeline].plan;
  if (tp == nullptr && ep == nullptr) return BuildRankLayers(spec, p, role.device);
  const int L = static_cast<int>(spec.kinds.size());
  std::vector<std::unique_ptr<Layer>> layers(L);
  for (int l : HeldLayers(spec, plan, role)) {
    const std::string& kind = spec.kinds[l];
    if (kind == "moe") {
      ASSIGN_OR_RETURN(layers[l], MakeParallelMoe(spec.dims, l, ep, tp));
    } else if (tp != nullptr) {
      ASSIGN_OR_RETURN(layers[l], MakeTensorParallelLayer(kind, spec.dims, l, tp));
    } else {
      ASSIGN_OR_RETURN(layers[l], MakeLayer(kind, spec.dims, l));
    }
  }
  return layers;
}

// For each op of this rank's list: the layers whose gradients are final once it is done (a
// stage's layers after its last W / BW op).
std::vector<std::vector<int>> ReadyAfterOp(const ModelSpec& spec, const Plan& plan, int device) {
  const std::vector<Op>& ops = plan.schedule.ops[device];
  std::vector<std::vector<int>> ready(ops.size());
  std::map<int, size_t> last;  // stage -> index of its last gradient op
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kW || ops[i].kind == OpKind::kBW) last[ops[i].stage] = i;
  }
  for (const auto& [stage, index] : last) {
    const StageAssignment& st = plan.stages[stage];
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      if (!IsVocabSplit(spec, plan, l)) ready[index].push_back(l);
    }
  }
  return ready;
}

// A MoE layer under EP or TP is an expert-parallel shard; any other layer under TP a
// tensor-parallel one; the rest whole.
bool MoeShard(const ModelSpec& spec, const LayoutPlan& plan, int layer) {
  return spec.kinds[layer] == "moe" && (plan.layout.ep > 1 || plan.layout.tp > 1);
}

// Member (ep_rank, tp_rank)'s part of layer `layer`'s whole tensors (parameters or moments).
absl::StatusOr<std::vector<Tensor>> CutShard(const ModelSpec& spec, const LayoutPlan& plan,
                                             int layer, int ep_rank, int tp_rank,
                                             const std::vector<Tensor>& whole) {
  const ParallelLayout& l = plan.layout;
  if (MoeShard(spec, plan, layer)) {
    return ParallelMoeShard(spec.dims, whole, ep_rank, l.ep, tp_rank, l.tp);
  }
  if (l.tp > 1) return TensorParallelShard(spec.kinds[layer], spec.dims, whole, tp_rank, l.tp);
  return whole;
}

// The inverse: the whole layer from the parts of one whole copy, indexed [ep rank][tp rank].
absl::StatusOr<std::vector<Tensor>> MergeShards(
    const ModelSpec& spec, const LayoutPlan& plan, int layer,
    const std::vector<std::vector<std::vector<Tensor>>>& parts) {
  if (MoeShard(spec, plan, layer)) return MergeParallelMoeShards(spec.dims, parts);
  if (plan.layout.tp > 1) {
    return MergeTensorParallelShards(spec.kinds[layer], spec.dims, parts[0]);
  }
  return parts[0][0];
}

// The tag base of a shard's part sent to the rank that writes its layer (below the vocabulary
// parts' and the stop word's tags).
constexpr uint32_t kShardPartTag = 0xFFFFFC00u;
// The tag of a failure snapshot's shard header (its iteration), just below the parts'.
constexpr uint32_t kShardIterationTag = kShardPartTag - 1;

// Checkpoint files of whole layers from shards. For each layer, its whole copy is the ranks of
// one replica (dp rank 0; for a MoE layer under EP, of EP group 0's replicas) holding it, every
// TP rank; its first rank gathers the others' parts (parameters, then moments, point to point)
// and writes the merged layer. Every rank handles its layers in ascending order, so the
// blocking sends meet their receives in one global order. With `own_copy` (a failure
// snapshot) each rank's copy is its own: its replica (its EP group's replicas), so every copy
// whose members survive writes the layer.
class ShardedCheckpoint {
 public:
  ShardedCheckpoint(const ModelSpec& spec, const LayoutPlan& plan, const Setup& setup, int rank,
                    bool own_copy = false)
      : spec_(spec), plan_(plan), rank_(rank), own_copy_(own_copy) {
    const RankRole& me = setup.roles[rank];
    const int ep = std::max(1, plan.layout.ep);
    for (int l : HeldLayers(spec, plan, me)) {
      const bool moe = spec.kinds[l] == "moe";
      const int copies = moe ? plan.layout.ep : 1;
      const int first_dp = !own_copy ? 0 : moe ? me.dp_rank / ep * ep : me.dp_rank;
      std::vector<std::vector<int>> copy(copies);
      for (int e = 0; e < copies; ++e) {
        const auto [p, r] = setup.replica_of[first_dp + e];
        const Plan& pp = plan.pipelines[p].plan;
        int device = 0;
        for (const StageAssignment& st : pp.stages) {
          if (st.first_layer <= l && l <= st.last_layer) device = st.device;
        }
        for (int t = 0; t < plan.layout.tp; ++t) {
          copy[e].push_back(plan.pipelines[p].replicas[r].device_ranks[device] + t);
        }
      }
      copies_[l] = std::move(copy);
    }
  }

  // This rank's part `own` of its layer: sent to the layer's writer, or (on the writer) merged
  // with the others' parts and written under `root`; nothing when this rank is not in the copy.
  // Whether this rank wrote the layer file.
  absl::StatusOr<bool> Save(LayerCheckpoint own, Transport* transport, const std::string& root) {
    const std::vector<std::vector<int>>& copy = copies_.at(own.layer);
    const int writer = copy[0][0];
    bool member = false;
    for (const std::vector<int>& e : copy) {
      member = member || std::find(e.begin(), e.end(), rank_) != e.end();
    }
    if (!member) return false;
    // A failure snapshot's members may have completed different iterations (without the
    // committed step): each tells the writer its part's iteration, and the writer writes only
    // parts of its own.
    int64_t iteration = own.iteration;
    if (own_copy_ && rank_ != writer) {
      RETURN_IF_ERROR(transport->Send(writer, kShardIterationTag, &iteration, sizeof(iteration)));
    }
    if (rank_ != writer) {
      uint32_t tag = kShardPartTag;
      for (const std::vector<Tensor>* part :
           {&own.params, &own.first_moments, &own.second_moments}) {
        for (const Tensor& t : *part) {
          RETURN_IF_ERROR(transport->Send(writer, tag++, t.data(), t.size() * sizeof(float)));
        }
      }
      return false;
    }
    // The writer: every member's parts, shaped as the whole layer cut for that member.
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> whole_layer,
                     MakeLayer(spec_.kinds[own.layer], spec_.dims, own.layer));
    std::vector<Tensor> whole_shapes;
    for (Tensor* p : whole_layer->params()) whole_shapes.push_back(*p);
    const bool moments = !own.first_moments.empty();
    using Parts = std::vector<std::vector<std::vector<Tensor>>>;
    Parts params(copy.size()), first(copy.size()), second(copy.size());
    for (size_t e = 0; e < copy.size(); ++e) {
      for (size_t t = 0; t < copy[e].size(); ++t) {
        if (copy[e][t] == rank_) {
          params[e].push_back(own.params);
          first[e].push_back(own.first_moments);
          second[e].push_back(own.second_moments);
          continue;
        }
        if (own_copy_) {
          int64_t theirs = -1;
          RETURN_IF_ERROR(transport->Recv(copy[e][t], kShardIterationTag, &theirs, sizeof(theirs)));
          if (theirs != iteration) {
            return absl::FailedPreconditionError(absl::StrCat(
                "layer ", own.layer, ": rank ", copy[e][t], " holds its shard of iteration ",
                theirs, ", this rank of ", iteration, ": not written"));
          }
        }
        ASSIGN_OR_RETURN(std::vector<Tensor> shape,
                         CutShard(spec_, plan_, own.layer, static_cast<int>(e),
                                  static_cast<int>(t), whole_shapes));
        std::vector<Tensor> p = shape, m = moments ? shape : std::vector<Tensor>{},
                            v = moments ? shape : std::vector<Tensor>{};
        uint32_t tag = kShardPartTag;
        for (std::vector<Tensor>* part : {&p, &m, &v}) {
          for (Tensor& x : *part) {
            RETURN_IF_ERROR(transport->Recv(copy[e][t], tag++, x.data(), x.size() * sizeof(float)));
          }
        }
        params[e].push_back(std::move(p));
        first[e].push_back(std::move(m));
        second[e].push_back(std::move(v));
      }
    }
    ASSIGN_OR_RETURN(own.params, MergeShards(spec_, plan_, own.layer, params));
    if (moments) {
      ASSIGN_OR_RETURN(own.first_moments, MergeShards(spec_, plan_, own.layer, first));
      ASSIGN_OR_RETURN(own.second_moments, MergeShards(spec_, plan_, own.layer, second));
    }
    RETURN_IF_ERROR(WriteLayerCheckpoint(root, own));
    return true;
  }

 private:
  const ModelSpec& spec_;
  const LayoutPlan& plan_;
  const int rank_;
  const bool own_copy_;
  std::map<int, std::vector<std::vector<int>>> copies_;  // layer -> [ep rank][tp rank] -> rank
};

// A rank's collectives by group name, owned.
using CollectiveMap = std::map<std::string, std::unique_ptr<Collective>>;

// The collectives of the groups `rank` belongs to, made in the global order (members, then
// name) so no two ranks wait on each other's group in opposite orders.
absl::StatusOr<CollectiveMap> MakeRankCollectives(const Setup& setup, int rank,
                                                  Transport* transport) {
  std::vector<std::pair<std::vector<int>, std::string>> order;
  for (const auto& [name, members] : setup.groups) order.push_back({members, name});
  std::sort(order.begin(), order.end());
  CollectiveMap owned;
  for (const auto& [members, name] : order) {
    if (std::find(members.begin(), members.end(), rank) == members.end()) continue;
    absl::StatusOr<std::unique_ptr<Collective>> c = transport->NewCollective(members, name);
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("rank ", rank, ": making group ", name,
                                                          ": ", c.status().message()));
    }
    owned[name] = std::move(*c);
  }
  return owned;
}

// The collective of group `name` (nullptr for no group).
Collective* GroupOf(const CollectiveMap& owned, const std::string& name) {
  return name.empty() ? nullptr : owned.at(name).get();
}

// What one rank of a multi-pipeline layout trains with, shared by its training hooks.
struct LayoutRank {
  const ModelSpec& spec;
  const LayoutPlan& plan;
  const Setup& setup;
  const RankRole& role;
  const LayoutPipelinePlan& pipe;
  const PipelineReplica& replica;
  const CollectiveMap& owned;
  int rank;
  Transport* transport;
  const TrainOptions& options;
};

// The global ranks of this rank's pipeline: TP rank t of each device talks to TP rank t of the
// next.
std::vector<int> PipelineRanks(const LayoutRank& r) {
  std::vector<int> pipeline_ranks;
  for (int first : r.replica.device_ranks) pipeline_ranks.push_back(first + r.role.tp_rank);
  return pipeline_ranks;
}

// Checkpoints hold whole layers. A split head (TP 1, one pipeline) is written by replica 0 as a
// single pipeline writes it; every other layer by the first rank of its whole copy, which
// gathers the copy's shards (ShardedCheckpoint).
absl::Status WriteLayoutCheckpoint(const LayoutRank& r, SubTransport* pipeline_transport,
                                   ShardedCheckpoint* sharded, int completed,
                                   const AdamW& optimizer, RankResult* result) {
  if (r.pipe.plan.vocab_parallel) {
    if (r.role.dp_rank != 0) return absl::OkStatus();
    return WritePipelineCheckpoint(r.spec, r.pipe.plan, r.role.device, pipeline_transport,
                                   completed, result, optimizer, r.options.checkpoint_dir);
  }
  ASSIGN_OR_RETURN(std::vector<LayerCheckpoint> mine,
                   RankLayerCheckpoints(completed, result->layers, optimizer));
  for (LayerCheckpoint& c : mine) {
    RETURN_IF_ERROR(sharded->Save(std::move(c), r.transport, r.options.checkpoint_dir).status());
  }
  return absl::OkStatus();
}

// Whether rank `r` holds layer `layer` whole (not as TP or EP shards).
bool HoldsWhole(const LayoutRank& r, int layer) {
  return r.plan.layout.tp == 1 && !MoeShard(r.spec, r.plan, layer);
}

// A failure snapshot's sharded layers (TrainingHooks::snapshot_shards): each gathered over the
// rank's own copy (`own`, ShardedCheckpoint with own_copy) and written by its first rank. Stops
// at the first layer that cannot be gathered (a member lost: the later ones have the same).
absl::StatusOr<int> SnapshotShards(const LayoutRank& r, ShardedCheckpoint* own, int iteration,
                                   std::vector<std::unique_ptr<Layer>>& layers,
                                   const AdamW& optimizer) {
  ASSIGN_OR_RETURN(std::vector<LayerCheckpoint> mine,
                   RankLayerCheckpoints(iteration, layers, optimizer));
  int written = 0;
  for (LayerCheckpoint& c : mine) {
    if (HoldsWhole(r, c.layer)) continue;
    ASSIGN_OR_RETURN(const bool wrote,
                     own->Save(std::move(c), r.transport, r.options.checkpoint_dir));
    written += wrote ? 1 : 0;
  }
  return written;
}

// One iteration on this rank: its replica's micro-batches of the global batch through the
// engine, the gradient all-reduces overlapping it, and the global batch's loss on every
// replica's last device (TP rank 0: the others hold the same number and report none).
absl::StatusOr<IterationStats> RunLayoutIteration(const LayoutRank& r, PipelineEngine* engine,
                                                  GradientSync* sync, int it) {
  const int M = r.pipe.plan.num_microbatches;
  const std::vector<MicroBatch> all =
      IterationData(r.spec, r.options.data_seed, it, r.plan.global_microbatches);
  const std::vector<MicroBatch> mine(all.begin() + r.replica.first_microbatch,
                                     all.begin() + r.replica.first_microbatch + M);
  sync->Begin();
  absl::StatusOr<IterationStats> stats = engine->RunIteration(mine);
  double wait_s = 0, sync_s = 0;
  absl::Status synced = sync->Finish(&wait_s, &sync_s);
  if (!stats.ok()) return stats.status();
  if (!synced.ok()) {
    return absl::Status(synced.code(), absl::StrCat("rank ", r.rank, ": ", synced.message()));
  }
  stats->grad_sync_wait_s = wait_s;
  stats->grad_sync_s = sync_s;
  stats->wall_s += wait_s;
  if (stats->has_loss && r.role.tp_rank > 0) stats->has_loss = false;
  if (stats->has_loss) {
    double share = stats->loss * M / r.plan.global_microbatches;
    if (!r.setup.loss_group.empty()) {
      float f = static_cast<float>(share);
      if (absl::Status s = GroupOf(r.owned, r.setup.loss_group)->AllReduceSum(&f, 1); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("loss: ", s.message()));
      }
      share = f;
    }
    stats->loss = share;
  }
  return stats;
}

// The training loop's hooks for a layout rank: checkpoints of whole layers (cut back to this
// rank's shards on resume) and layout iterations.
TrainingHooks LayoutHooks(const LayoutRank& r, SubTransport* pipeline_transport,
                          PipelineEngine* engine, GradientSync* sync, ShardedCheckpoint* sharded,
                          ShardedCheckpoint* own_copy, RankResult* result) {
  TrainingHooks hooks;
  hooks.write_checkpoint = [&r, pipeline_transport, sharded, result](
                               int completed, const AdamW& optimizer) -> absl::Status {
    return WriteLayoutCheckpoint(r, pipeline_transport, sharded, completed, optimizer, result);
  };
  hooks.whole = [&r](int layer) { return HoldsWhole(r, layer); };
  hooks.snapshot_shards = [&r, own_copy](int iteration,
                                         std::vector<std::unique_ptr<Layer>>& layers,
                                         const AdamW& optimizer) {
    return SnapshotShards(r, own_copy, iteration, layers, optimizer);
  };
  hooks.cut = [&r](int layer, const std::vector<Tensor>& whole) {
    return CutShard(r.spec, r.plan, layer, r.role.ep_rank, r.role.tp_rank, whole);
  };
  hooks.iterate = [&r, engine, sync](int it) -> absl::StatusOr<IterationStats> {
    return RunLayoutIteration(r, engine, sync, it);
  };
  return hooks;
}

}  // namespace

absl::Status CheckLayoutRunnable(const ModelSpec& spec, const LayoutPlan& plan) {
  const int L = static_cast<int>(spec.kinds.size());
  RETURN_IF_ERROR(ValidateLayoutPlan(plan, L));
  const int tp = plan.layout.tp, ep = plan.layout.ep;
  for (int l = 0; l < L; ++l) {
    const std::string& kind = spec.kinds[l];
    if (kind == "moe") {
      if (tp > 1 || ep > 1) RETURN_IF_ERROR(CheckParallelMoe(spec.dims, l, ep, tp));
    } else if (tp > 1) {
      RETURN_IF_ERROR(CheckTensorParallel(kind, spec.dims, l, tp));
    }
  }
  for (const LayoutPipelinePlan& p : plan.pipelines) {
    if (p.plan.vocab_parallel && spec.dims.vocab < p.plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab_parallel: vocab ", spec.dims.vocab, " has fewer entries than the ",
          p.plan.num_devices, " devices"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RankResult> TrainLayoutRank(const ModelSpec& spec, const LayoutPlan& plan,
                                           int rank, Transport* transport,
                                           const TrainOptions& options) {
  RETURN_IF_ERROR(CheckLayoutRunnable(spec, plan));
  if (transport->size() != plan.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("the layout runs on ", plan.num_ranks,
                                                   " ranks, the transport has ",
                                                   transport->size()));
  }
  if (plan.single_pipeline()) {
    return TrainRank(spec, plan.pipelines[0].plan, rank, transport, options);
  }
  const Setup setup = MakeSetup(spec, plan);
  const RankRole& role = setup.roles[rank];
  const LayoutPipelinePlan& pipe = plan.pipelines[role.pipeline];
  ASSIGN_OR_RETURN(const CollectiveMap owned, MakeRankCollectives(setup, rank, transport));
  const LayoutRank r{spec,  plan, setup,     role,   pipe, pipe.replicas[role.replica],
                     owned, rank, transport, options};

  RankResult result;
  result.rank = rank;
  ASSIGN_OR_RETURN(result.layers,
                   BuildLayoutLayers(spec, plan, role, GroupOf(owned, setup.tp_group[rank]),
                                     GroupOf(owned, setup.ep_group[rank])));
  SubTransport pipeline_transport(transport, PipelineRanks(r), role.device);
  PipelineEngine engine(pipe.plan, role.device, &result.layers, &pipeline_transport,
                        spec.dims.batch * spec.dims.seq_len, spec.dims.hidden);
  RETURN_IF_ERROR(engine.Validate());
  engine.set_loss_scale_microbatches(plan.global_microbatches);

  // The gradient all-reduces, each started once this rank has finished its layer's last
  // weight-gradient op of the iteration.
  std::map<std::string, Collective*> dp_collectives;
  for (const Bucket& b : setup.buckets[rank]) dp_collectives[b.group] = GroupOf(owned, b.group);
  GradientSync sync(setup.buckets[rank], dp_collectives, &result.layers);
  const std::vector<std::vector<int>> ready = ReadyAfterOp(spec, pipe.plan, role.device);
  engine.set_on_op_done([&](size_t i) {
    if (i < ready.size()) {
      for (int l : ready[i]) sync.MarkReady(l);
    }
  });

  ShardedCheckpoint sharded(spec, plan, setup, rank);
  ShardedCheckpoint own_copy(spec, plan, setup, rank, /*own_copy=*/true);
  const TrainingHooks hooks =
      LayoutHooks(r, &pipeline_transport, &engine, &sync, &sharded, &own_copy, &result);
  RETURN_IF_ERROR(RunTrainingLoop(spec, rank, transport, options, hooks, &result));
  return result;
}

}  // namespace octopipe::executor

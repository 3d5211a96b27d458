#include "executor/layers/expert_parallel.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "executor/layers/common.h"
#include "executor/layers/moe.h"
#include "executor/layers/rmsnorm.h"
#include "executor/layers/swiglu.h"

namespace octopipe::executor {
namespace {

constexpr int kReplicatedParams = 2;  // gain, router
constexpr int kParamsPerExpert = 3;   // W1, W3, W2
// Counts travel as floats: every integer up to 2^24 is exact.
constexpr int64_t kMaxExactCount = int64_t{1} << 24;

// Context. F: norm state, gates [T, k], the expert outputs returned to this member [T k, H] (in
// send order, for the gate gradient), then per local expert four tensors from kLocal + 4 le: the
// rows it received (its input, for W), the SwiGLU's a, c and h. B appends the router logits'
// gradient, dn, and per local expert the output gradients of W2, W1, W3 (dout, da, dc).
enum Slot { kXhat, kInvRms, kNorm, kGates, kReturned, kLocal };
enum ExpertForward { kIn, kA, kC, kH, kExpertForwardSlots };
enum ExpertBackward { kDout, kDa, kDc, kExpertBackwardSlots };
// saved_index: the chosen experts [T k] token-major; the copies' positions t k + slot in send
// order (sorted by expert, stable); rows sent to / received from each EP member; then per local
// expert the rows of the receive buffer it processes, in order.
enum Index { kChoice, kSendOrder, kSendRows, kRecvRows, kExpertRows };

size_t ForwardSlots(int local) { return kLocal + size_t{kExpertForwardSlots} * local; }
size_t DlogitsSlot(int local) { return ForwardSlots(local); }
size_t DnSlot(int local) { return ForwardSlots(local) + 1; }
size_t ExpertForwardSlot(int le, ExpertForward which) {
  return kLocal + size_t{kExpertForwardSlots} * le + which;
}
size_t ExpertBackwardSlot(int local, int le, ExpertBackward which) {
  return ForwardSlots(local) + 2 + size_t{kExpertBackwardSlots} * le + which;
}
size_t AllSlots(int local) { return ExpertBackwardSlot(local, local, kDout); }

int GroupSize(const Collective* group) { return group == nullptr ? 1 : group->size(); }
int GroupRank(const Collective* group) { return group == nullptr ? 0 : group->rank(); }

Tensor GatherRows(const Tensor& src, const std::vector<int32_t>& rows) {
  Tensor out(static_cast<Eigen::Index>(rows.size()), src.cols());
  for (size_t i = 0; i < rows.size(); ++i) out.row(static_cast<Eigen::Index>(i)) = src.row(rows[i]);
  return out;
}

// dst->row(rows[i]) = src.row(i).
void ScatterRows(const Tensor& src, const std::vector<int32_t>& rows, Tensor* dst) {
  for (size_t i = 0; i < rows.size(); ++i) {
    dst->row(rows[i]) = src.row(static_cast<Eigen::Index>(i));
  }
}

int64_t Sum(const std::vector<int32_t>& v) {
  int64_t s = 0;
  for (int32_t x : v) s += x;
  return s;
}

// The split's checks; `where` ends the messages ("layer 4, moe").
absl::Status CheckSplit(const ModelDims& dims, int ep, int tp, absl::string_view where) {
  for (auto [field, value] : {std::pair<const char*, int>{"hidden", dims.hidden},
                              {"experts", dims.experts},
                              {"moe_ffn", dims.moe_ffn}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("moe: dims.", field, " must be > 0, got ", value, " (", where, ")"));
    }
  }
  if (dims.top_k < 1 || dims.top_k > dims.experts) {
    return absl::InvalidArgumentError(absl::StrCat("moe: dims.top_k must be in [1, ", dims.experts,
                                                   "], got ", dims.top_k, " (", where, ")"));
  }
  if (ep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert parallelism: ep must be >= 1, got ", ep, " (", where, ")"));
  }
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: tp must be >= 1, got ", tp, " (", where, ")"));
  }
  if (dims.experts % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert parallelism: ", ep, " does not divide experts = ", dims.experts, " (", where, ")"));
  }
  if (dims.moe_ffn % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: ", tp, " does not divide moe_ffn = ", dims.moe_ffn, " (", where, ")"));
  }
  return absl::OkStatus();
}

// Appends TP member tp_rank's slices of one expert: W1 and W3 columns, W2 rows
// [tp_rank width, (tp_rank + 1) width).
void AppendExpertSlice(const Tensor& w1, const Tensor& w3, const Tensor& w2, int tp_rank, int width,
                       std::vector<Tensor>* out) {
  out->push_back(w1.middleCols(static_cast<Eigen::Index>(tp_rank) * width, width));
  out->push_back(w3.middleCols(static_cast<Eigen::Index>(tp_rank) * width, width));
  out->push_back(w2.middleRows(static_cast<Eigen::Index>(tp_rank) * width, width));
}

// The names and shapes of a member's params() (experts_per_member experts of width `width`).
struct TensorSpec {
  std::string name;
  Eigen::Index rows, cols;
};
std::vector<TensorSpec> ParamSpecs(const ModelDims& dims, int first_expert, int experts,
                                   int width) {
  std::vector<TensorSpec> specs = {{"gain", 1, dims.hidden}, {"router", dims.hidden, dims.experts}};
  for (int e = first_expert; e < first_expert + experts; ++e) {
    specs.push_back({absl::StrCat("expert ", e, " W1"), dims.hidden, width});
    specs.push_back({absl::StrCat("expert ", e, " W3"), dims.hidden, width});
    specs.push_back({absl::StrCat("expert ", e, " W2"), width, dims.hidden});
  }
  return specs;
}

absl::Status CheckShapes(const std::vector<Tensor>& tensors, const std::vector<TensorSpec>& specs,
                         absl::string_view what) {
  if (tensors.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", tensors.size(), " tensors, expected ", specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (tensors[i].rows() != specs[i].rows || tensors[i].cols() != specs[i].cols) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " tensor ", i, " (", specs[i].name, ") is ", tensors[i].rows(), "x",
                       tensors[i].cols(), ", expected ", specs[i].rows, "x", specs[i].cols));
    }
  }
  return absl::OkStatus();
}

class ParallelMoeLayer final : public Layer {
 public:
  ParallelMoeLayer(const ModelDims& dims, int layer_index, Collective* ep, Collective* tp)
      : ep_(ep),
        tp_(tp),
        ep_size_(GroupSize(ep)),
        tp_size_(GroupSize(tp)),
        hidden_(dims.hidden),
        experts_(dims.experts),
        top_k_(dims.top_k),
        local_experts_(dims.experts / ep_size_),
        first_expert_(GroupRank(ep) * local_experts_),
        gain_(Tensor::Ones(1, dims.hidden)),
        router_(InitialMoeRouter(dims, layer_index)),
        dgain_(Tensor::Zero(1, dims.hidden)),
        drouter_(Tensor::Zero(dims.hidden, dims.experts)) {
    const int width = dims.moe_ffn / tp_size_;
    std::vector<Tensor> slices;
    for (int le = 0; le < local_experts_; ++le) {
      Tensor w1, w3, w2;
      InitMoeExpert(dims, layer_index, first_expert_ + le, &w1, &w3, &w2);
      AppendExpertSlice(w1, w3, w2, GroupRank(tp), width, &slices);
    }
    for (int le = 0; le < local_experts_; ++le) {
      w1_.push_back(std::move(slices[kParamsPerExpert * le]));
      w3_.push_back(std::move(slices[kParamsPerExpert * le + 1]));
      w2_.push_back(std::move(slices[kParamsPerExpert * le + 2]));
      dw1_.push_back(Tensor::Zero(dims.hidden, width));
      dw3_.push_back(Tensor::Zero(dims.hidden, width));
      dw2_.push_back(Tensor::Zero(width, dims.hidden));
    }
  }

  absl::string_view kind() const override { return "moe"; }

  std::vector<Tensor*> params() override {
    std::vector<Tensor*> out = {&gain_, &router_};
    for (int le = 0; le < local_experts_; ++le) {
      out.insert(out.end(), {&w1_[le], &w3_[le], &w2_[le]});
    }
    return out;
  }
  std::vector<Tensor*> grads() override {
    std::vector<Tensor*> out = {&dgain_, &drouter_};
    for (int le = 0; le < local_experts_; ++le) {
      out.insert(out.end(), {&dw1_[le], &dw3_[le], &dw2_[le]});
    }
    return out;
  }
  absl::Status comm_status() const override { return comm_status_; }

  Tensor Forward(const Tensor& x, const MicroBatch& /*mb*/, LayerContext* ctx) const override {
    const int k = top_k_;
    ctx->Clear();
    ctx->saved.resize(ForwardSlots(local_experts_));
    ctx->saved_index.assign(kExpertRows + local_experts_, {});
    std::vector<Tensor>& sv = ctx->saved;
    std::vector<std::vector<int32_t>>& index = ctx->saved_index;
    sv[kNorm] = RmsNormForward(x, gain_, &sv[kXhat], &sv[kInvRms]);
    const Tensor& n = sv[kNorm];
    const Tensor logits = n * router_;
    MoeRoute(logits, k, &index[kChoice], &sv[kGates]);
    const std::vector<int32_t>& choice = index[kChoice];
    const Tensor& gates = sv[kGates];

    // Copies sorted by expert (so by owner), token order within an expert: a counting sort.
    std::vector<int32_t> per_expert(experts_, 0);
    for (int32_t e : choice) ++per_expert[e];
    std::vector<int32_t> next(experts_, 0);
    for (int e = 1; e < experts_; ++e) next[e] = next[e - 1] + per_expert[e - 1];
    std::vector<int32_t>& order = index[kSendOrder];
    order.resize(choice.size());
    for (size_t p = 0; p < choice.size(); ++p) order[next[choice[p]]++] = static_cast<int32_t>(p);
    std::vector<int32_t>& send_rows = index[kSendRows];
    send_rows.assign(ep_size_, 0);
    for (int e = 0; e < experts_; ++e) send_rows[e / local_experts_] += per_expert[e];

    // Counts [source member][local expert] of the rows this member's experts receive; the rows
    // of local expert le are those of block (s, le) of the receive buffer for every source s.
    const std::vector<int32_t> counts = ExchangeCounts(per_expert);
    std::vector<int32_t>& recv_rows = index[kRecvRows];
    recv_rows.assign(ep_size_, 0);
    int32_t row = 0;
    for (int s = 0; s < ep_size_; ++s) {
      for (int le = 0; le < local_experts_; ++le) {
        const int32_t c = counts[s * local_experts_ + le];
        recv_rows[s] += c;
        for (int32_t j = 0; j < c; ++j) index[kExpertRows + le].push_back(row++);
      }
    }

    Tensor send(static_cast<Eigen::Index>(order.size()), hidden_);
    for (size_t i = 0; i < order.size(); ++i) {
      send.row(static_cast<Eigen::Index>(i)) = n.row(order[i] / k);
    }
    const Tensor received = ExchangeRows(send, send_rows, recv_rows);
    Tensor out(received.rows(), hidden_);
    for (int le = 0; le < local_experts_; ++le) {
      const std::vector<int32_t>& rows = index[kExpertRows + le];
      Tensor& in = sv[ExpertForwardSlot(le, kIn)];
      in = GatherRows(received, rows);
      ScatterRows(SwiGluForward(in, Weights(le), &sv[ExpertForwardSlot(le, kA)],
                                &sv[ExpertForwardSlot(le, kC)], &sv[ExpertForwardSlot(le, kH)]),
                  rows, &out);
    }
    sv[kReturned] = ExchangeRows(out, recv_rows, send_rows);

    const Tensor& returned = sv[kReturned];
    Tensor z = Tensor::Zero(x.rows(), hidden_);
    for (size_t i = 0; i < order.size(); ++i) {
      const int p = order[i];
      z.row(p / k) += gates(p / k, p % k) * returned.row(static_cast<Eigen::Index>(i));
    }
    AllReduceTp(&z);
    return x + z;
  }

  Tensor BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                       LayerContext* ctx) const override {
    CheckContext(*ctx, ForwardSlots(local_experts_), kind(), "BackwardInput");
    const int k = top_k_;
    ctx->saved.resize(AllSlots(local_experts_));
    std::vector<Tensor>& sv = ctx->saved;
    const std::vector<std::vector<int32_t>>& index = ctx->saved_index;
    const std::vector<int32_t>& order = index[kSendOrder];
    const Tensor& gates = sv[kGates];
    const Tensor& returned = sv[kReturned];

    // [dn | dgates], both partial over TP until the all-reduce.
    Tensor partial = Tensor::Zero(dy.rows(), hidden_ + k);
    Tensor dout_send(static_cast<Eigen::Index>(order.size()), hidden_);
    for (size_t i = 0; i < order.size(); ++i) {
      const int t = order[i] / k, slot = order[i] % k;
      const Eigen::Index row = static_cast<Eigen::Index>(i);
      partial(t, hidden_ + slot) = dy.row(t).dot(returned.row(row));
      dout_send.row(row) = gates(t, slot) * dy.row(t);
    }
    const Tensor dout_received = ExchangeRows(dout_send, index[kSendRows], index[kRecvRows]);
    Tensor dn_rows(dout_received.rows(), hidden_);
    for (int le = 0; le < local_experts_; ++le) {
      const std::vector<int32_t>& rows = index[kExpertRows + le];
      Tensor& dout = sv[ExpertBackwardSlot(local_experts_, le, kDout)];
      dout = GatherRows(dout_received, rows);
      ScatterRows(SwiGluBackwardInput(dout, Weights(le), sv[ExpertForwardSlot(le, kA)],
                                      sv[ExpertForwardSlot(le, kC)],
                                      &sv[ExpertBackwardSlot(local_experts_, le, kDa)],
                                      &sv[ExpertBackwardSlot(local_experts_, le, kDc)]),
                  rows, &dn_rows);
    }
    const Tensor dn_returned = ExchangeRows(dn_rows, index[kRecvRows], index[kSendRows]);
    for (size_t i = 0; i < order.size(); ++i) {
      partial.row(order[i] / k).head(hidden_) += dn_returned.row(static_cast<Eigen::Index>(i));
    }
    AllReduceTp(&partial);

    Tensor& dlogits = sv[DlogitsSlot(local_experts_)];
    dlogits = MoeLogitGradient(gates, partial.rightCols(k), index[kChoice], experts_);
    Tensor& dn = sv[DnSlot(local_experts_)];
    dn = partial.leftCols(hidden_);
    dn.noalias() += dlogits * router_.transpose();
    Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kXhat], sv[kInvRms]);
    for (Slot slot : {kInvRms, kGates, kReturned}) sv[slot] = Tensor();
    for (int le = 0; le < local_experts_; ++le) {
      for (ExpertForward which : {kA, kC}) sv[ExpertForwardSlot(le, which)] = Tensor();
    }
    return dx;
  }

  void BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) override {
    CheckContext(*ctx, AllSlots(local_experts_), kind(), "BackwardWeight");
    const std::vector<Tensor>& sv = ctx->saved;
    drouter_.noalias() += sv[kNorm].transpose() * sv[DlogitsSlot(local_experts_)];
    for (int le = 0; le < local_experts_; ++le) {
      SwiGluBackwardWeight(sv[ExpertForwardSlot(le, kIn)], sv[ExpertForwardSlot(le, kH)],
                           sv[ExpertBackwardSlot(local_experts_, le, kDout)],
                           sv[ExpertBackwardSlot(local_experts_, le, kDa)],
                           sv[ExpertBackwardSlot(local_experts_, le, kDc)], &dw1_[le], &dw3_[le],
                           &dw2_[le]);
    }
    RmsNormBackwardWeight(sv[DnSlot(local_experts_)], sv[kXhat], &dgain_);
  }

 private:
  SwiGluWeights Weights(int le) const { return {w1_[le], w3_[le], w2_[le]}; }

  void Record(absl::Status status) const {
    if (comm_status_.ok()) comm_status_ = std::move(status);
  }

  // The EP all-to-all of per-expert copy counts: per_expert [experts] of this member in; out
  // [source member][local expert]. Zeros once communication has failed.
  std::vector<int32_t> ExchangeCounts(const std::vector<int32_t>& per_expert) const {
    if (ep_size_ == 1) return per_expert;
    std::vector<int32_t> counts(static_cast<size_t>(ep_size_) * local_experts_, 0);
    if (!comm_status_.ok()) return counts;
    if (Sum(per_expert) >= kMaxExactCount) {
      Record(absl::ResourceExhaustedError(
          absl::StrCat("expert parallelism over ", ep_->name(), ": ", Sum(per_expert),
                       " routed copies in one micro-batch, over the limit of ", kMaxExactCount)));
      return counts;
    }
    const std::vector<float> send(per_expert.begin(), per_expert.end());
    std::vector<float> recv(counts.size(), 0.0f);
    const std::vector<size_t> each(ep_size_, static_cast<size_t>(local_experts_));
    Record(ep_->AllToAllV(send.data(), each, recv.data(), each));
    if (!comm_status_.ok()) return counts;
    for (size_t i = 0; i < recv.size(); ++i) {
      if (!(recv[i] >= 0.0f && recv[i] < static_cast<float>(kMaxExactCount)) ||
          recv[i] != std::floor(recv[i])) {
        Record(absl::InternalError(absl::StrCat("expert parallelism over ", ep_->name(),
                                                ": member ", i / local_experts_,
                                                " sent an invalid count ", recv[i])));
        return std::vector<int32_t>(counts.size(), 0);
      }
      counts[i] = static_cast<int32_t>(recv[i]);
    }
    return counts;
  }

  // The EP all-to-all of rows of `hidden_` floats: send_rows[j] rows of `send` (consecutive, in
  // member order) to member j, recv_rows[j] rows from member j. Zeros once communication has
  // failed.
  Tensor ExchangeRows(const Tensor& send, const std::vector<int32_t>& send_rows,
                      const std::vector<int32_t>& recv_rows) const {
    if (ep_size_ == 1) return send;
    Tensor recv = Tensor::Zero(static_cast<Eigen::Index>(Sum(recv_rows)), hidden_);
    if (!comm_status_.ok()) return recv;
    std::vector<size_t> send_counts(ep_size_), recv_counts(ep_size_);
    for (int j = 0; j < ep_size_; ++j) {
      send_counts[j] = static_cast<size_t>(send_rows[j]) * hidden_;
      recv_counts[j] = static_cast<size_t>(recv_rows[j]) * hidden_;
    }
    // Empty tensors have no storage; give the transport a valid address all the same.
    float none = 0.0f;
    Record(ep_->AllToAllV(send.size() > 0 ? send.data() : &none, send_counts,
                          recv.size() > 0 ? recv.data() : &none, recv_counts));
    return recv;
  }

  // In place over the TP group; left as it is once communication has failed.
  void AllReduceTp(Tensor* t) const {
    if (tp_size_ == 1 || !comm_status_.ok() || t->size() == 0) return;
    Record(tp_->AllReduceSum(t->data(), static_cast<size_t>(t->size())));
  }

  Collective* const ep_;
  Collective* const tp_;
  const int ep_size_;
  const int tp_size_;
  const int hidden_;
  const int experts_;
  const int top_k_;
  const int local_experts_;
  const int first_expert_;
  Tensor gain_, router_;
  std::vector<Tensor> w1_, w3_, w2_;
  Tensor dgain_, drouter_;
  std::vector<Tensor> dw1_, dw3_, dw2_;
  mutable absl::Status comm_status_;
};

}  // namespace

absl::Status CheckParallelMoe(const ModelDims& dims, int layer_index, int ep, int tp) {
  return CheckSplit(dims, ep, tp, absl::StrCat("layer ", layer_index, ", moe"));
}

absl::StatusOr<std::unique_ptr<Layer>> MakeParallelMoe(const ModelDims& dims, int layer_index,
                                                       Collective* ep, Collective* tp) {
  if (layer_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("layer_index must be >= 0, got ", layer_index));
  }
  if (absl::Status s = CheckParallelMoe(dims, layer_index, GroupSize(ep), GroupSize(tp)); !s.ok()) {
    return s;
  }
  return std::make_unique<ParallelMoeLayer>(dims, layer_index, ep, tp);
}

int ParallelMoeReplicatedParams() { return kReplicatedParams; }

absl::StatusOr<std::vector<Tensor>> MergeParallelMoeShards(
    const ModelDims& dims, const std::vector<std::vector<std::vector<Tensor>>>& shards) {
  const int ep = static_cast<int>(shards.size());
  const int tp = shards.empty() ? 0 : static_cast<int>(shards[0].size());
  if (absl::Status s = CheckSplit(dims, ep, tp, "merging moe shards"); !s.ok()) return s;
  const int local = dims.experts / ep;
  const int width = dims.moe_ffn / tp;
  for (int i = 0; i < ep; ++i) {
    if (static_cast<int>(shards[i].size()) != tp) {
      return absl::InvalidArgumentError(absl::StrCat("merging moe shards: EP member ", i, " has ",
                                                     shards[i].size(), " TP members, member 0 ",
                                                     tp));
    }
    const std::vector<TensorSpec> specs = ParamSpecs(dims, i * local, local, width);
    for (int r = 0; r < tp; ++r) {
      if (absl::Status s = CheckShapes(
              shards[i][r], specs, absl::StrCat("merging moe shards: member [", i, "][", r, "]"));
          !s.ok()) {
        return s;
      }
    }
  }
  std::vector<Tensor> whole = {shards[0][0][0], shards[0][0][1]};
  for (int e = 0; e < dims.experts; ++e) {
    const int i = e / local;
    const size_t first = kReplicatedParams + size_t{kParamsPerExpert} * (e % local);
    Tensor w1(dims.hidden, dims.moe_ffn), w3(dims.hidden, dims.moe_ffn),
        w2(dims.moe_ffn, dims.hidden);
    for (int r = 0; r < tp; ++r) {
      const Eigen::Index begin = static_cast<Eigen::Index>(r) * width;
      w1.middleCols(begin, width) = shards[i][r][first];
      w3.middleCols(begin, width) = shards[i][r][first + 1];
      w2.middleRows(begin, width) = shards[i][r][first + 2];
    }
    whole.push_back(std::move(w1));
    whole.push_back(std::move(w3));
    whole.push_back(std::move(w2));
  }
  return whole;
}

absl::StatusOr<std::vector<Tensor>> ParallelMoeShard(const ModelDims& dims,
                                                     const std::vector<Tensor>& whole, int ep_rank,
                                                     int ep, int tp_rank, int tp) {
  if (absl::Status s = CheckSplit(dims, ep, tp, "cutting a moe shard"); !s.ok()) return s;
  if (ep_rank < 0 || ep_rank >= ep || tp_rank < 0 || tp_rank >= tp) {
    return absl::InvalidArgumentError(absl::StrCat("cutting a moe shard: member [", ep_rank, "][",
                                                   tp_rank, "] is outside ", ep, " x ", tp));
  }
  if (absl::Status s = CheckShapes(whole, ParamSpecs(dims, 0, dims.experts, dims.moe_ffn),
                                   "cutting a moe shard: the whole layer");
      !s.ok()) {
    return s;
  }
  const int local = dims.experts / ep;
  std::vector<Tensor> shard = {whole[0], whole[1]};
  for (int e = ep_rank * local; e < (ep_rank + 1) * local; ++e) {
    const size_t first = kReplicatedParams + size_t{kParamsPerExpert} * e;
    AppendExpertSlice(whole[first], whole[first + 1], whole[first + 2], tp_rank, dims.moe_ffn / tp,
                      &shard);
  }
  return shard;
}

ParallelMoeCollectives ParallelMoeCollectivesPerMicroBatch(const ModelDims& dims, int ep, int tp) {
  ParallelMoeCollectives c;
  c.tokens = int64_t{dims.batch} * dims.seq_len;
  c.routed_floats = c.tokens * dims.top_k * dims.hidden;
  if (ep > 1) {
    c.forward.ep_count_all_to_alls = 1;
    c.forward.ep_row_all_to_alls = 2;         // rows of n out, expert outputs back
    c.backward_input.ep_row_all_to_alls = 2;  // output gradients out, dn rows back
  }
  if (tp > 1) {
    c.forward.tp_all_reduces = 1;
    c.forward.tp_all_reduce_floats = c.tokens * dims.hidden;
    c.backward_input.tp_all_reduces = 1;
    c.backward_input.tp_all_reduce_floats = c.tokens * (dims.hidden + dims.top_k);
  }
  return c;
}

}  // namespace octopipe::executor

// SubTransport: the Transport of one group of ranks inside a larger one — a pipeline replica's
// devices (pipeline device d = global rank ranks[d]) as the pipeline engine sees them. Messages
// and collectives go to the global ranks; tags are unchanged, so the pipelines of different
// replicas (disjoint rank sets) cannot mix. Does not own the base transport.
#ifndef OCTOPIPE_EXECUTOR_SUB_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_SUB_TRANSPORT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/transport.h"

namespace octopipe::executor {

class SubTransport final : public Transport {
 public:
  // `ranks`: the global rank of each local rank; `rank` is this one's local index.
  SubTransport(Transport* base, std::vector<int> ranks, int rank)
      : base_(base), ranks_(std::move(ranks)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return base_->name(); }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override {
    return base_->Send(Global(dst), tag, data, bytes);
  }
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override {
    return base_->Recv(Global(src), tag, data, bytes);
  }
  bool has_async() const override { return base_->has_async(); }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int dst, uint32_t tag,
                                                            const void* data,
                                                            size_t bytes) override {
    return base_->StartSend(Global(dst), tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int src, uint32_t tag, void* data,
                                                            size_t bytes) override {
    return base_->StartRecv(Global(src), tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override {
    std::vector<int> global;
    for (int r : ranks) global.push_back(Global(r));
    return base_->NewCollective(global, name);
  }

 private:
  // Out-of-range local ranks map to -1, which the base transport refuses naming it.
  int Global(int local) const {
    return local >= 0 && local < size() ? ranks_[local] : -1;
  }

  Transport* const base_;
  const std::vector<int> ranks_;
  const int rank_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_SUB_TRANSPORT_H_

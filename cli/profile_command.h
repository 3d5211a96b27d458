// `octopipe profile`: measures the executor's reference model on this machine and transport and
// writes what the planner needs to plan for it:
//
//   PREFIX.model.json    the model file (proto/model.proto) with every layer's measured F, B, W
//                        and R seconds for one micro-batch, and the executor's own activation
//                        (after F, and after B until W), input, output and parameter bytes;
//   PREFIX.cluster.json  one node of --ranks devices: the measured per-op executor overhead,
//                        GEMM rate, memory, memory bandwidth, and the link's latency and
//                        bandwidth fitted over the message sizes the plans send.
//
// How: the ranks run a split-backward pipeline (ZB-H1; F, B and W of each layer as their own
// ops) on the real transport for 1 + --repeat iterations, in fresh launches (every other one
// with the ranks mirrored, so each layer is timed on every rank) until the summed per-layer
// medians settle (--stable, --max_launches); each layer's op time is its mean over the
// micro-batches of one iteration, and the file gets the median over all measured iterations (the
// spread, (max - min) / median, is printed). A launch with every stage recomputed times R. Ranks
// 0 and 1 ping-pong messages of the plans' size to fit latency + bytes / bandwidth. Last, a
// message-heavy plan (interleaved, 2 stages per rank) and the profile's plan run in adjacent
// pairs (order alternating); the per-message CPU cost (HardwareSpec::message_cpu_s) is fitted
// so that the simulator's ratio between them matches the pairs' median ratio (FitMessageCpu).
//
// Then: octopipe plan --model=PREFIX.model.json --cluster=PREFIX.cluster.json --out=plan.json
//       octopipe train --model=ref:SPEC --plan=plan.json
#ifndef OCTOPIPE_CLI_PROFILE_COMMAND_H_
#define OCTOPIPE_CLI_PROFILE_COMMAND_H_

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "calibration/profile_fit.h"  // FitLink, FitMessageCpu: the command's fits
#include "core/cluster.h"
#include "core/model_graph.h"
#include "core/plan.h"

namespace octopipe::cli {

int RunProfile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// A measured profile must give every layer positive F, B, W and R seconds. kInvalidArgument
// naming the layer (index and name) and the field: "layers[3] (L3.moe): measured.weight_grad_s
// is missing" or "... must be > 0, got 0".
absl::Status ValidateMeasuredProfile(const ModelGraph& model);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PROFILE_COMMAND_H_

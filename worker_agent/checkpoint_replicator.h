// CheckpointReplicator: checkpoints that survive the loss of a node without shared storage.
//
// Each agent keeps its jobs' checkpoints in a local directory (ROOT/JOB, executor/checkpoint.h)
// and serves them through its TCP store (the port it already registered with the planner) under
// keys "ckpt/JOB/ITERATION/LAYER": a peer's set stores a layer file (its bytes are verified —
// magic, checksum, header — and written atomically at the path their header names), a get reads
// one (answered at once, found or not), and a get of "ckpt/JOB/held" lists the layer files this
// node holds for JOB. A background thread pushes every layer file this node's ranks write to
// the peers Replicate names — every other node of the job's current plan, or the next K of
// them in the ring of its nodes (ReplicaNodes, the agent's --checkpoint_replicas) — once per
// (file, peer); files received from peers are not forwarded (their writer pushes them itself).
// Before its first push to a peer for a job, the thread asks the peer which files it holds and
// skips those: an agent that restarts (and so forgot what it pushed and what it received) does
// not send the job's old checkpoints again. So every layer of every checkpoint a node finished
// writing and pushing lives on K + 1 nodes, and after the loss of up to K nodes the survivors
// together hold it.
//
// Agreement: ranks on different nodes must load the same iteration. The agent holding plan
// device 0 gathers the layers it lacks of the newest checkpoint complete across the live
// agents (GatherNewest), chooses the newest complete checkpoint it then holds, and publishes
// it in its store under the run's rendezvous prefix; the other agents read it there, fetch the
// layer files of that iteration they lack from that agent, and start their ranks on it
// (RunConfig::resume_iteration).
//
// Thread-safe.
#ifndef OCTOPIPE_WORKER_AGENT_CHECKPOINT_REPLICATOR_H_
#define OCTOPIPE_WORKER_AGENT_CHECKPOINT_REPLICATOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/tcp_store.h"

namespace octopipe::agent {

// The store key of one layer file of a job's checkpoint.
std::string CheckpointKey(const std::string& job_id, int64_t iteration, int layer);
// The store key whose value lists the layer files a node holds for a job: one
// "ITERATION/LAYER" a line (files by name, as ListLayerCheckpoints finds them).
std::string HeldCheckpointsKey(const std::string& job_id);

// The nodes a node pushes its layer files to when each file is kept on `replicas` peers: the
// `replicas` nodes after `self` in the sorted ring of `nodes` (which holds self), all others
// when `replicas` < 0 or at least their number. Every node's files then live on `replicas`
// + 1 nodes, so any `replicas` nodes may be lost.
std::vector<std::string> ReplicaNodes(std::vector<std::string> nodes, const std::string& self,
                                      int replicas);

class CheckpointReplicator {
 public:
  // `root` holds a directory per job; `timeout` bounds each connection to a peer.
  CheckpointReplicator(std::string root, std::chrono::milliseconds timeout);
  ~CheckpointReplicator();  // stops the pushing thread
  CheckpointReplicator(const CheckpointReplicator&) = delete;
  CheckpointReplicator& operator=(const CheckpointReplicator&) = delete;

  // Serves ROOT's layer files to peers through `store` (the "ckpt/" keys). The store must be
  // destroyed before this replicator (its serving threads call into it).
  void Serve(executor::TcpStoreServer* store);

  // From now on pushes the layer files of `job_id` written on this node to `peers` (store
  // addresses HOST:PORT); replaces the previous job and peers.
  void Replicate(const std::string& job_id, std::vector<std::string> peers);

  // Makes ROOT/JOB hold every layer (0..num_layers-1) of `iteration`: fetches the ones missing
  // or invalid here from `peer`. kUnavailable / kNotFound naming the peer and layer otherwise.
  absl::Status FetchMissing(const std::string& job_id, int64_t iteration, int num_layers,
                            const std::string& peer);

  // With replicas on only some peers, no node need hold every layer: finds the newest iteration
  // of which every layer 0..num_layers-1 is held here or by one of `peers` (their held lists;
  // a peer that cannot be asked is left out), and fetches the layers missing here from a peer
  // holding each (the next holder when one fails). Returns that iteration, or 0 when no
  // iteration can be completed (ROOT/JOB then holds what it held before). `connect_timeout`
  // bounds each connection attempt (a peer just lost refuses or times out within it).
  int64_t GatherNewest(const std::string& job_id, int num_layers,
                       const std::vector<std::string>& peers,
                       std::chrono::milliseconds connect_timeout);

  // Layer files pushed to peers so far (for tests and logs).
  int64_t pushed() const;
  // Pushes that failed (a peer lost since it was asked what it holds): at most one per peer
  // per pass, the peer then being left for the rest of the pass.
  int64_t failed_pushes() const;
  // Completed passes over ROOT looking for files to push: a file present before pass k started
  // has been pushed (or deliberately not) once scans() > k.
  int64_t scans() const;

 private:
  void PushLoop();
  void PushOnce();
  // Fetches one layer file through `client` (connected to `peer`) and stores it (verified)
  // under ROOT/JOB.
  absl::Status FetchLayer(executor::TcpStore& client, const std::string& peer,
                          const std::string& job_id, int64_t iteration, int layer);
  // Makes ROOT/JOB hold one layer file: already valid here, or fetched from one of `holders`
  // ("" stands for this node). Whether it is here now.
  bool GatherLayer(const std::string& job_id, int64_t iteration, int layer,
                   const std::vector<std::string>& holders,
                   std::chrono::milliseconds connect_timeout);
  // Asks `peer` once per job which of the job's files it holds and records them as pushed to
  // it. False when the peer cannot be asked now (nothing is pushed to it this pass).
  bool LearnHeld(const std::string& job, const std::string& peer);
  executor::TcpStore* Client(const std::string& address);  // the pushing thread's

  const std::string root_;
  const std::chrono::milliseconds timeout_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string job_;
  std::vector<std::string> peers_;
  // (job, iteration, layer) files that arrived from peers: not pushed on.
  std::set<std::tuple<std::string, int64_t, int>> received_;
  // peer -> files pushed to it, or that it already held when asked.
  std::map<std::string, std::set<std::tuple<std::string, int64_t, int>>> pushed_to_;
  std::set<std::pair<std::string, std::string>> asked_;  // (peer, job) whose held files are known
  int64_t pushed_ = 0;
  int64_t failed_pushes_ = 0;
  int64_t scans_ = 0;

  std::map<std::string, std::unique_ptr<executor::TcpStore>> clients_;  // pushing thread only

  std::thread thread_;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_CHECKPOINT_REPLICATOR_H_

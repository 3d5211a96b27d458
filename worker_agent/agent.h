// Agent: the per-node worker daemon's policy — register, heartbeat, follow the plans of the
// jobs that use this node, run their ranks, report what they measured, survive peers and
// planners that come and go. No gRPC here: the planner is a PlannerLink, the ranks a
// RankLauncher, metrics an AgentObserver.
//
// States (AgentState):
//   kRegistering  not (or no longer) registered; retries with back-off (ranks keep running)
//   kWatching     registered, no run on this node
//   kRunning(v)   this node's ranks train version v of a job
//   kSwitching(v→v') a newer version (or none for this node) was published: rank 0 is asked to
//                 stop at the next iteration boundary; every rank checkpoints and exits; then
//                 kWatching starts v' if it uses this node (resuming from the checkpoint).
// Following versions (any sequence converges on the newest): a version runs here at most once to
// completion, and only while it is the newest this agent has seen. When a newer version
// appears, a run that has completed no iteration yet (its ranks are still meeting, e.g. waiting
// for a peer that went straight to the newer version) is killed at once — nothing is lost, its
// resume checkpoint is still the newest —; one whose peers the newer version says were lost (a
// node_failure version leaving out a node of the run: its ranks cannot stop cleanly) is left to
// fail on its own within the transport timeout and killed only if it is still running then
// (plus a grace); one that is training stops at the next iteration boundary. A run whose ranks
// fail (a peer was lost: the transport names it within its timeout) is reported as a
// "rank_failed" job event and, while its version is still the newest, restarted from the newest
// complete checkpoint under a fresh rendezvous prefix ("JOB/vV/rN", restart N) up to
// `max_rank_restarts` times (every node's ranks fail together, so their agents count the same
// N); a node loss makes the planner publish a newer version within its heartbeat timeout, which
// supersedes the restart. A restart waits until the agent of every other node of the plan
// answers (a TCP connect to its store): while one does not — its node was most likely lost —
// the restart would only fail again, so it is held, logged once, until that agent answers or
// the newer version arrives and runs instead. An unreachable planner changes nothing for
// running ranks; the agent retries with exponential back-off (capped) and re-registers when the
// planner forgot it.
//
// Recovery from the survivors' memory: a failing rank writes the layers it holds whole, as they
// are after the last completed iteration, into this node's checkpoint directory
// (TrainOptions::snapshot_on_failure; reported as a "state_saved" event). Those files are
// replicated and gathered like any checkpoint's (below), so when the surviving replicas hold
// every layer the newest complete checkpoint is that iteration: the next run loses at most the
// interrupted iteration. Layers with no surviving whole copy (or TP/EP shards) come from the
// last periodic checkpoint, and then the whole run resumes from that older iteration.
//
// Rendezvous without a shared file system: every agent serves a TCP store (executor/tcp_store.h)
// and registers its address; the ranks of version v connect through the store of the agent
// whose node holds plan device 0, found with PlannerLink::Agents, under the prefix "JOB/vV".
// Checkpoints without shared storage: each agent keeps CHECKPOINT_ROOT/JOB locally and copies
// the layer files its ranks write to `checkpoint_replicas` (default: all) other nodes of the job
// through their stores (CheckpointReplicator); the agent holding plan device 0 gathers the
// layers of the newest checkpoint complete across the live agents that it lacks, picks that
// iteration for every rank of the run (the newest checkpoint complete on its node) and publishes
// it as "PREFIX/resume" in its store; the others fetch the layer files of it they lack from that
// agent.
//
// Not thread-safe: one thread calls Tick in a loop (Run does that).
#ifndef OCTOPIPE_WORKER_AGENT_AGENT_H_
#define OCTOPIPE_WORKER_AGENT_AGENT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/clock.h"
#include "worker_agent/report_pacer.h"
#include "executor/model_spec.h"
#include "executor/tcp_store.h"
#include "worker_agent/checkpoint_replicator.h"
#include "worker_agent/planner_link.h"
#include "worker_agent/rank_launcher.h"
#include "worker_agent/run_files.h"
#include "executor/transport_factory.h"

namespace octopipe::agent {

enum class AgentState { kRegistering, kWatching, kRunning, kSwitching };
const char* AgentStateName(AgentState state);

struct AgentOptions {
  std::string node;
  int num_devices = 1;
  executor::TransportKind transport = executor::TransportKind::kGloo;  // not kInProc
  std::string advertise_host = "127.0.0.1";  // where ranks and the store listen
  int store_port = 0;                   // TCP rendezvous store; 0 picks one
  std::string work_dir;                 // run directories (local)
  std::string checkpoint_root;          // per job subdirectory (shared between nodes)
  double transport_timeout_s = 10;      // a lost peer fails the ranks within this
  double max_backoff_s = 1;             // planner retries back off up to this
  int report_every_iterations = 5;      // stage times reported to the planner this often,
  double report_min_interval_s = 1;     // and at most once per this many seconds (ReportPacer)
  int max_rank_restarts = 3;            // restarts of one version after its ranks failed
  // Peers each layer file written here is copied to (ReplicaNodes); < 0: every other node of
  // the plan. Any `checkpoint_replicas` nodes may be lost without losing a checkpoint.
  int checkpoint_replicas = -1;
  // The clock of every interval and deadline the agent keeps (heartbeats, back-off, job polls,
  // the wait for peers' checkpoint layers) and of the plan-switch time it reports. Not owned;
  // null: RealClock::Default().
  const Clock* clock = nullptr;
};

// One iteration as seen by this node's ranks (for metrics).
struct NodeIteration {
  std::string job_id;
  int64_t version = 0;
  int iteration = 0;
  double wall_s = 0;                 // slowest local rank
  std::map<int, double> rank_bubble;  // plan device -> 1 - busy / wall
  double local_bubble = 0;           // over this node's ranks
  bool has_loss = false;
  double loss = 0;
  double tokens_per_s = 0;
  // This iteration's ops on this node, keyed (stage, kind); for the vocabulary-parallel passes
  // S and T the key's first field is the plan device that ran them, not a stage.
  StageOpTimes ops;
  std::map<int, int> stage_device;  // stage -> the plan device that ran its F/B/W/BW/R ops here
  StageOpTimes layer_ops;  // (layer, kind) on this node
  double checkpoint_s = -1;  // slowest local rank's checkpoint after it; -1: none
  double overhead_s = 0;     // the agent's bookkeeping in the ranks (slowest local rank)
  double mean_overhead_ratio = 0;  // sum of overhead_s / sum of wall_s over the job here
};

// Told what the agent does (metrics, logs); every method has a no-op default.
class AgentObserver {
 public:
  virtual ~AgentObserver() = default;
  virtual void OnState(AgentState state) {}
  virtual void OnPlanVersion(const std::string& job_id, int64_t version) {}
  virtual void OnIteration(const NodeIteration& iteration) {}
  virtual void OnRankRestart(const std::string& job_id) {}
  // A plan switch on this node: from seeing the newer version to the new version's first
  // iteration here (stop at the boundary, checkpoint, restart the ranks, resume).
  virtual void OnPlanSwitch(const std::string& job_id, double seconds) {}
  virtual void OnEvent(const std::string& job_id, const JobEventReport& event) {}
};

// The ranks this node runs for a version: kFailedPrecondition ("plan refused") when the slots
// do not cover the plan's devices or name a device this node does not have.
absl::StatusOr<std::vector<LocalRank>> LocalRanksOf(const AgentJob& job, const std::string& node,
                                                    int num_devices);

class Agent {
 public:
  // Not owned: link, launcher and observer must outlive the agent (observer may be null).
  Agent(AgentOptions options, PlannerLink* link, RankLauncher* launcher,
        AgentObserver* observer = nullptr);

  // Starts the rendezvous store. kUnavailable when it cannot listen.
  absl::Status Init();

  // One pass of the loop at the clock's current time (AgentOptions::clock); returns the
  // seconds until the next pass should run.
  double Tick();

  // True once the planner said the node was drained and this node's ranks have stopped: the
  // agent has left (Run returns).
  bool left() const { return leaving_ && !launcher_->active(); }

  // Ticks until `stop` becomes true (checked every pass) or the agent left after a drain, then
  // kills the ranks (none are left after a drain). Sleeps between passes in real time for what
  // Tick returned.
  void Run(const std::atomic<bool>& stop);

  AgentState state() const { return state_; }
  std::string store_address() const;
  // The job and version running (or switching away from); "" / 0 when none.
  const std::string& running_job() const { return run_.job_id; }
  int64_t running_version() const { return run_.version; }

 private:
  struct ActiveRun {
    std::string job_id;
    int64_t version = 0;
    int restart = 0;  // 0: the version's first run; N: its N-th restart after a failure
    std::string dir;
    AgentJob job;
    bool holds_rank0 = false;
    bool superseded = false;  // a newer version (or none for this node) was seen
    bool abandoned = false;   // killed before its first iteration because superseded
    std::string lost;         // a newer version says its peers were lost
    double kill_at_s = -1;    // then: killed if still running at this clock_ time
    std::map<int, size_t> offsets;  // jsonl read offsets per local rank
    std::map<int, std::map<int, IterationRecord>> partial;  // iteration -> rank -> record
    double tokens_per_iteration = 0;
    StageOpTimes unreported;
    StageOpTimes unreported_layers;
    // Plan device -> busy and iteration seconds summed over the unreported iterations.
    std::map<int, DeviceBusyReport> unreported_devices;
    // Local rank -> the pipeline-0 device whose times it reports (see BeginRun); ranks of
    // other pipelines, replicas or TP ranks are not reported.
    std::map<int, int> report_device;
    int iterations_seen = 0;
    int completed = 0;  // iterations complete on every local rank
    ProgressReport progress;  // the newest iteration's, for ReportTimes
  };

  // What a version needs to run on this node.
  struct RunnableJob {
    std::vector<LocalRank> ranks;  // the plan devices on this node
    executor::ModelSpec spec;
  };
  // Where a run meets its peers: the rendezvous store (the agent holding plan device 0), the
  // agents its checkpoint layers are copied to, and every live agent (any may hold layers of
  // the newest checkpoint).
  struct RunPeers {
    std::string store;
    std::vector<std::string> replicas;
    std::vector<std::string> holders;
    // Every other node of the plan and its live agent's store ("": no live agent listed).
    std::vector<std::pair<std::string, std::string>> plan_peers;
  };

  void KeepRegistered(double now_s);
  void FollowJobs(double now_s);
  // Starts this node's ranks of `job`: kUnavailable while a peer or the resume point is not
  // ready (tried again on the next pass), kFailedPrecondition / kInvalidArgument for a version
  // that cannot run here (refused once, with a "plan_refused" event).
  absl::Status StartRun(const AgentJob& job);
  // kUnavailable (logged once per restart) while the agent of another node of the plan does
  // not answer: a restart (`prefix` JOB/vV/rN) then waits for it or for a newer version.
  absl::Status HoldRestartWhileAPeerIsDown(const RunPeers& peers, const std::string& prefix);
  // The ranks and model of `job`, or refuses the version (remembered as run, reported).
  absl::StatusOr<RunnableJob> RunnableOrRefuse(const AgentJob& job);
  absl::StatusOr<RunPeers> PeersOf(const AgentJob& job);
  // 0 for a version's first run; N for its N-th restart after its ranks failed.
  int RestartNumber(const AgentJob& job) const;
  RunConfig RunConfigOf(const AgentJob& job, const std::string& prefix, int64_t resume_from,
                        const std::string& store) const;
  // A fresh run directory with the plan and the run's configuration; returns its path.
  absl::StatusOr<std::string> WriteRunDir(const AgentJob& job, const RunConfig& config);
  // The started run becomes run_ (kRunning), told to the observer and, by the agent holding
  // plan device 0, to the planner ("started" / "resumed").
  void BeginRun(const AgentJob& job, const RunnableJob& runnable, int restart_no,
                const std::string& dir, int64_t resume_from, const std::string& store);
  // The iteration every rank of the run resumes from (see the top comment); kUnavailable while
  // it cannot be known yet (retried on the next pass). `holders`: the other live agents' stores,
  // where the rank-0 agent gathers the layers of the newest checkpoint it lacks.
  absl::StatusOr<int64_t> AgreeOnResume(const AgentJob& job, const std::string& prefix,
                                        const std::string& rank0_store, int num_layers,
                                        const std::vector<std::string>& holders);
  void ReadProgress();
  // ReadProgress's steps. Reads the lines the local ranks appended to their iteration logs
  // since the last pass (a partial last line waits for the next) into run_.partial.
  void ReadRankLogs();
  // The node's view of iteration `it` from every local rank's record of it: the slowest
  // rank's wall time, the reporting replica's op times, the bubble ratios and throughput.
  NodeIteration CombineRecords(int it, const std::map<int, IterationRecord>& records) const;
  // Publishes a completed iteration: the run's progress, the job's overhead ratio, the
  // observer, and the end of a plan switch it completes.
  void PublishIteration(NodeIteration* n);
  // Adds a completed iteration (past the run's warm-up one) to the times not yet reported,
  // and reports them when due.
  void AccumulateReport(const NodeIteration& n, const std::map<int, IterationRecord>& records);
  void FinishRun(const std::vector<RankOutcome>& outcomes);
  // A "state_saved" event per iteration some local rank saved from memory after a failure
  // (RankOutcome::snapshot_iteration).
  void ReportSnapshots(const std::vector<RankOutcome>& outcomes);
  // A newer version is out (`newer`, null when the job no longer lists this node or is gone):
  // kill a run that has not completed an iteration or whose peers the newer version says were
  // lost (node_failure), stop one that is training at the iteration boundary.
  void LeaveSupersededRun(const AgentJob* newer);
  // True once any local rank recorded an iteration of this run.
  bool RunProgressed() const;
  // Reports (and clears) the stage, per-layer and per-device times not yet reported (the
  // planner computes the pipeline-wide measured bubble ratio from the per-device ones).
  void ReportTimes();
  void Event(const std::string& job_id, JobEventReport event);
  void SetState(AgentState s);
  bool UsesThisNode(const AgentJob& job) const;
  const AgentJob* Target() const;

  const AgentOptions options_;
  const Clock& clock_;
  ReportPacer report_pacer_;
  PlannerLink* const link_;
  RankLauncher* const launcher_;
  AgentObserver* const observer_;
  // Declared before the store, which calls into it from its serving threads: the store is
  // destroyed (its threads joined) first.
  std::unique_ptr<CheckpointReplicator> replicator_;
  std::unique_ptr<executor::TcpStoreServer> store_;

  AgentState state_ = AgentState::kRegistering;
  bool registered_ = false;
  double heartbeat_interval_s_ = 1;
  double next_contact_s_ = 0;  // next Register/Heartbeat attempt
  double backoff_s_ = 0;       // 0 while the planner answers
  double next_jobs_poll_s_ = 0;
  std::vector<AgentJob> jobs_;  // last known
  ActiveRun run_;
  std::set<std::string> done_jobs_;
  // job -> newest version finished here for good (completed, stopped, superseded, refused, or
  // out of restarts): each version is started again only as a restart.
  std::map<std::string, int64_t> ran_;
  // job -> (iteration, until when on clock_): a clean stop on this node reached that
  // iteration; the rank-0 agent waits (briefly) for its peers' layers of it before resuming.
  std::map<std::string, std::pair<int64_t, double>> expected_checkpoint_;
  // job -> (version, restart) of the next restart of a version whose ranks failed.
  std::map<std::string, std::pair<int64_t, int>> restarts_;
  // The restart last logged as held (job/vV/rN), so that a held restart is logged once.
  std::string restart_hold_logged_;
  bool leaving_ = false;
  // The switch in progress: the job and when its newer version was seen (clock_ seconds).
  std::string switching_job_;
  int64_t switching_from_ = 0;  // the version left
  double switch_seen_s_ = 0;
  // job -> (sum of overhead_s, sum of wall_s) over the iterations seen here.
  std::map<std::string, std::pair<double, double>> overhead_;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_AGENT_H_

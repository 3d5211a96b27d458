#include "worker_agent/agent.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/convert.h"
#include "core/status_macros.h"
#include "executor/checkpoint.h"
#include "executor/model_spec.h"
#include "spdlog/spdlog.h"

namespace octopipe::agent {
namespace {

namespace fs = std::filesystem;

}  // namespace

const char* AgentStateName(AgentState s) {
  switch (s) {
    case AgentState::kRegistering: return "registering";
    case AgentState::kWatching: return "watching";
    case AgentState::kRunning: return "running";
    case AgentState::kSwitching: return "switching";
  }
  return "?";
}

absl::StatusOr<std::vector<LocalRank>> LocalRanksOf(const AgentJob& job, const std::string& node,
                                                    int num_devices) {
  // A link's single-pipeline version may come without its layout (AgentJob::layout).
  const int num_ranks =
      job.layout.pipelines.empty() ? job.plan.num_devices : job.layout.num_ranks;
  if (static_cast<int>(job.slots.size()) != num_ranks) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan v", job.version, " has ", num_ranks, " ranks but ",
                     job.slots.size(), " device slots"));
  }
  std::vector<LocalRank> out;
  for (int d = 0; d < static_cast<int>(job.slots.size()); ++d) {
    const DeviceSlot& slot = job.slots[d];
    if (slot.node != node) continue;
    if (slot.local_device < 0 || slot.local_device >= num_devices) {
      return absl::FailedPreconditionError(absl::StrCat(
          "plan v", job.version, " puts rank ", d, " on device ", slot.local_device, " of node ",
          node, ", which has ", num_devices, " device(s)"));
    }
    out.push_back({d, slot.local_device});
  }
  return out;
}

Agent::Agent(AgentOptions options, PlannerLink* link, RankLauncher* launcher,
             AgentObserver* observer)
    : options_(std::move(options)),
      clock_(ClockOrReal(options_.clock)),
      report_pacer_(options_.report_every_iterations, options_.report_min_interval_s),
      link_(link),
      launcher_(launcher),
      observer_(observer) {}

absl::Status Agent::Init() {
  absl::StatusOr<std::unique_ptr<executor::TcpStoreServer>> s =
      executor::TcpStoreServer::Start(options_.advertise_host, options_.store_port);
  if (!s.ok()) return s.status();
  store_ = std::move(*s);
  replicator_ = std::make_unique<CheckpointReplicator>(options_.checkpoint_root,
                                                       std::chrono::milliseconds(2000));
  replicator_->Serve(store_.get());
  return absl::OkStatus();
}

std::string Agent::store_address() const {
  return store_ ? absl::StrCat(options_.advertise_host, ":", store_->port()) : "";
}

void Agent::SetState(AgentState s) {
  if (s == state_) return;
  spdlog::info("agent {}: {} -> {}", options_.node, AgentStateName(state_), AgentStateName(s));
  state_ = s;
  if (observer_) observer_->OnState(s);
}

void Agent::Event(const std::string& job_id, JobEventReport event) {
  event.node = options_.node;
  // The planner refuses messages over 8 KB; an error text that long is cut, its length kept.
  constexpr size_t kMaxMessage = 4 << 10;
  if (event.message.size() > kMaxMessage) {
    event.message = absl::StrCat(event.message.substr(0, kMaxMessage), "... (",
                                 event.message.size(), " bytes)");
  }
  spdlog::info("agent {}: job {} event {} (v{}, iteration {}): {}", options_.node, job_id,
               std::string(JobEventKindName(event.kind)), event.plan_version, event.iteration,
               event.message);
  if (observer_) observer_->OnEvent(job_id, event);
  absl::Status s = link_->ReportEvent(job_id, event);
  if (!s.ok()) spdlog::warn("agent {}: cannot report event: {}", options_.node, std::string(s.message()));
}

void Agent::KeepRegistered(double now_s) {
  if (leaving_ || now_s < next_contact_s_) return;
  absl::Status s;
  if (!registered_) {
    absl::StatusOr<double> interval =
        link_->Register(options_.node, options_.num_devices, store_address());
    if (interval.ok()) {
      registered_ = true;
      heartbeat_interval_s_ = std::max(0.05, *interval);
      spdlog::info("agent {}: registered (store {}, heartbeat every {}s)", options_.node,
                   store_address(), heartbeat_interval_s_);
    }
    s = interval.status();
  } else {
    absl::StatusOr<bool> drained = link_->Heartbeat(options_.node);
    s = drained.status();
    if (drained.ok() && *drained) {
      spdlog::info("agent {}: the node was drained; leaving once its ranks have stopped",
                   options_.node);
      leaving_ = true;
      return;
    }
    if (absl::IsFailedPrecondition(s) || absl::IsNotFound(s)) {
      spdlog::warn("agent {}: the planner no longer counts this node ({}); registering again",
                   options_.node, std::string(s.message()));
      registered_ = false;
      next_contact_s_ = now_s;
      return;
    }
  }
  if (s.ok()) {
    backoff_s_ = 0;
    next_contact_s_ = now_s + heartbeat_interval_s_;
  } else {
    backoff_s_ = std::min(options_.max_backoff_s, backoff_s_ == 0 ? 0.1 : backoff_s_ * 2);
    next_contact_s_ = now_s + backoff_s_;
    spdlog::warn("agent {}: planner unreachable ({}); retrying in {:.1f}s", options_.node,
                 std::string(s.message()), backoff_s_);
  }
  if (!registered_ && state_ == AgentState::kWatching) SetState(AgentState::kRegistering);
  if (registered_ && state_ == AgentState::kRegistering) SetState(AgentState::kWatching);
}

bool Agent::UsesThisNode(const AgentJob& job) const {
  for (const DeviceSlot& s : job.slots) {
    if (s.node == options_.node) return true;
  }
  return false;
}

const AgentJob* Agent::Target() const {
  for (const AgentJob& job : jobs_) {
    if (done_jobs_.count(job.job_id) || !UsesThisNode(job)) continue;
    auto ran = ran_.find(job.job_id);
    if (ran != ran_.end() && ran->second >= job.version) continue;
    return &job;
  }
  return nullptr;
}

absl::StatusOr<Agent::RunnableJob> Agent::RunnableOrRefuse(const AgentJob& job) {
  absl::StatusOr<std::vector<LocalRank>> ranks =
      LocalRanksOf(job, options_.node, options_.num_devices);
  if (!ranks.ok()) {
    ran_[job.job_id] = job.version;
    Event(job.job_id, {JobEventKind::kPlanRefused, "", job.version, 0,
                       std::string(ranks.status().message())});
    return ranks.status();
  }
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(job.reference_model);
  if (!spec.ok()) {
    ran_[job.job_id] = job.version;
    Event(job.job_id, {JobEventKind::kPlanRefused, "", job.version, 0,
                       absl::StrCat("reference_model: ", spec.status().message())});
    return spec.status();
  }
  return RunnableJob{std::move(*ranks), std::move(*spec)};
}

absl::StatusOr<Agent::RunPeers> Agent::PeersOf(const AgentJob& job) {
  RunPeers out;
  const std::string& rank0_node = job.slots[0].node;
  if (rank0_node == options_.node) out.store = store_address();
  std::set<std::string> others;
  for (const DeviceSlot& slot : job.slots) {
    if (slot.node != options_.node) others.insert(slot.node);
  }
  std::map<std::string, std::string> live;  // other node -> its live agent's store
  absl::StatusOr<std::vector<AgentEndpoint>> agents = link_->Agents();
  if (!agents.ok() && !others.empty()) return agents.status();
  if (agents.ok()) {
    for (const AgentEndpoint& a : *agents) {
      if (a.alive && a.node != options_.node) live[a.node] = a.address;
    }
  }
  if (out.store.empty()) {
    auto rank0 = live.find(rank0_node);
    if (rank0 == live.end()) {
      return absl::UnavailableError(
          absl::StrCat("the agent of node ", rank0_node, " (plan device 0) is not registered"));
    }
    out.store = rank0->second;
  }
  std::vector<std::string> ring = {options_.node};
  for (const std::string& node : others) {
    if (live.count(node)) ring.push_back(node);
  }
  for (const std::string& node :
       ReplicaNodes(ring, options_.node, options_.checkpoint_replicas)) {
    out.replicas.push_back(live[node]);
  }
  // Any live agent may hold layers of the newest checkpoint (replicas on some peers only, or a
  // node left out of this plan).
  for (const auto& [node, address] : live) out.holders.push_back(address);
  for (const std::string& node : others) {
    auto agent = live.find(node);
    out.plan_peers.push_back({node, agent == live.end() ? std::string() : agent->second});
  }
  return out;
}

int Agent::RestartNumber(const AgentJob& job) const {
  auto restart = restarts_.find(job.job_id);
  return restart != restarts_.end() && restart->second.first == job.version
             ? restart->second.second
             : 0;
}

RunConfig Agent::RunConfigOf(const AgentJob& job, const std::string& prefix,
                             int64_t resume_from, const std::string& store) const {
  RunConfig config;
  config.prefix = prefix;
  config.resume_iteration = resume_from;
  config.job_id = job.job_id;
  config.plan_version = job.version;
  config.reference_model = job.reference_model;
  config.iterations = job.iterations;
  config.checkpoint_interval = job.checkpoint_interval;
  config.lr = job.lr;
  config.data_seed = job.data_seed;
  config.num_ranks = job.layout.num_ranks;
  config.transport = options_.transport;
  config.store_address = store;
  config.hostname = options_.advertise_host;
  config.timeout_s = options_.transport_timeout_s;
  config.checkpoint_dir = options_.checkpoint_root + "/" + job.job_id;
  return config;
}

absl::StatusOr<std::string> Agent::WriteRunDir(const AgentJob& job, const RunConfig& config) {
  const std::string dir =
      absl::StrCat(options_.work_dir, "/runs/", job.job_id, "-v", job.version);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  if (absl::Status s = WriteLayoutPlanFile(dir + "/plan.json", job.layout); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomically(dir + "/run.json", RunConfigJson(config)); !s.ok()) {
    return s;
  }
  return dir;
}

void Agent::BeginRun(const AgentJob& job, const RunnableJob& runnable, int restart_no,
                     const std::string& dir, int64_t resume_from, const std::string& store) {
  run_ = ActiveRun();
  report_pacer_.Restart();
  run_.job_id = job.job_id;
  run_.version = job.version;
  run_.restart = restart_no;
  run_.dir = dir;
  run_.job = job;
  run_.holds_rank0 = job.slots[0].node == options_.node;
  run_.tokens_per_iteration = static_cast<double>(job.layout.global_microbatches) *
                              runnable.spec.dims.batch * runnable.spec.dims.seq_len;
  for (const LocalRank& r : runnable.ranks) run_.offsets[r.rank] = 0;
  // Stage times are reported for pipeline 0 (the plan the version's result holds, whose stage
  // and device numbers the planner calibrates against): by its replica 0's ranks, TP rank 0.
  const std::vector<RankRole> roles = RankRoles(job.layout);
  for (const LocalRank& r : runnable.ranks) {
    const RankRole& role = roles[r.rank];
    if (role.pipeline == 0 && role.replica == 0 && role.tp_rank == 0) {
      run_.report_device[r.rank] = role.device;
    }
  }
  SetState(AgentState::kRunning);
  if (observer_) observer_->OnPlanVersion(job.job_id, job.version);
  if (restart_no > 0 && observer_) observer_->OnRankRestart(job.job_id);
  if (run_.holds_rank0) {
    const JobEventKind kind = resume_from > 0 ? JobEventKind::kResumed : JobEventKind::kStarted;
    Event(job.job_id, {kind, "", job.version, resume_from,
                       absl::StrCat(job.layout.num_ranks, " ranks (", job.layout.layout.ToString(),
                                    "), store ", store,
                                    restart_no > 0 ? absl::StrCat(", restart ", restart_no)
                                                   : std::string(),
                                    resume_from > 0
                                        ? absl::StrCat(", resumed from iteration ", resume_from)
                                        : std::string())});
  }
}

absl::Status Agent::StartRun(const AgentJob& job) {
  ASSIGN_OR_RETURN(const RunnableJob runnable, RunnableOrRefuse(job));
  // The rendezvous store: the one of the agent holding plan device 0; checkpoint replicas go
  // to the agents of `checkpoint_replicas` of the plan's other nodes (ReplicaNodes).
  ASSIGN_OR_RETURN(const RunPeers peers, PeersOf(job));
  // Every run has a fresh rendezvous namespace; a restart's is agreed without talking, since
  // every node's ranks failed together and each agent counts its restarts of the version.
  const int restart_no = RestartNumber(job);
  const std::string prefix =
      restart_no == 0 ? absl::StrCat(job.job_id, "/v", job.version)
                      : absl::StrCat(job.job_id, "/v", job.version, "/r", restart_no);
  // The checkpoint layers go to the live agents only (a held restart included: pushes to a
  // lost node would only wait out their connection timeouts).
  replicator_->Replicate(job.job_id, peers.replicas);
  if (restart_no > 0) RETURN_IF_ERROR(HoldRestartWhileAPeerIsDown(peers, prefix));
  ASSIGN_OR_RETURN(const int64_t resume_from,
                   AgreeOnResume(job, prefix, peers.store,
                                 static_cast<int>(runnable.spec.kinds.size()), peers.holders));
  if (resume_from >= job.iterations) {
    done_jobs_.insert(job.job_id);  // finished before (e.g. by this node before a restart)
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::string dir,
                   WriteRunDir(job, RunConfigOf(job, prefix, resume_from, peers.store)));
  RETURN_IF_ERROR(launcher_->Start(dir, runnable.ranks));
  BeginRun(job, runnable, restart_no, dir, resume_from, peers.store);
  return absl::OkStatus();
}

absl::Status Agent::HoldRestartWhileAPeerIsDown(const RunPeers& peers,
                                               const std::string& prefix) {
  for (const auto& [node, address] : peers.plan_peers) {
    // A short timeout: this runs on the agent's loop (a refused connection answers at once).
    const absl::Status up =
        address.empty() ? absl::UnavailableError("no live agent registered")
                        : executor::ProbeTcp(address, std::chrono::milliseconds(200));
    if (up.ok()) continue;
    if (restart_hold_logged_ != prefix) {
      restart_hold_logged_ = prefix;
      spdlog::info("agent {}: restart {} held: node {}'s agent does not answer ({}); waiting "
                   "for it or for a newer plan version",
                   options_.node, prefix, node, std::string(up.message()));
    }
    return absl::UnavailableError(
        absl::StrCat("restart held: node ", node, "'s agent does not answer"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Agent::AgreeOnResume(const AgentJob& job, const std::string& prefix,
                                             const std::string& rank0_store, int num_layers,
                                             const std::vector<std::string>& holders) {
  const std::string dir = options_.checkpoint_root + "/" + job.job_id;
  const std::string key = prefix + "/resume";
  if (job.slots[0].node == options_.node) {
    absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(job.reference_model);
    if (!spec.ok()) return spec.status();
    // The layers of the newest checkpoint this node lacks, from the peers holding them: with
    // replicas on some peers only, and with full replication too, where a peer's newest files
    // (its state saved from memory as its ranks failed) may still be on their way here. Short
    // connection timeouts: this runs on the agent's loop.
    if (!holders.empty()) {
      replicator_->GatherNewest(job.job_id, num_layers, holders, std::chrono::milliseconds(200));
    }
    absl::StatusOr<int64_t> latest = executor::LatestCompleteCheckpoint(dir, *spec);
    const int64_t k = latest.ok() ? *latest : 0;
    auto expected = expected_checkpoint_.find(job.job_id);
    if (expected != expected_checkpoint_.end()) {
      // This node's ranks stopped cleanly at that iteration; the peers' layers of it are on
      // their way (pushed as soon as written): worth a short wait rather than redoing work.
      if (k < expected->second.first && clock_.NowSeconds() < expected->second.second) {
        return absl::UnavailableError(absl::StrCat("waiting for the peers' layers of iteration ",
                                                   expected->second.first));
      }
      expected_checkpoint_.erase(expected);
    }
    store_->Set(key, std::to_string(k));
    return k;
  }
  // A short connection timeout: this runs on the agent's loop (heartbeats wait for it).
  executor::TcpStore rank0(rank0_store, std::chrono::milliseconds(200));
  absl::StatusOr<std::string> text = rank0.Fetch(key, std::chrono::milliseconds(0));
  int64_t k = 0;
  if (!text.ok() || !absl::SimpleAtoi(*text, &k)) {
    return absl::UnavailableError(absl::StrCat("waiting for the resume iteration from node ",
                                               job.slots[0].node, " (", rank0_store, ")"));
  }
  if (k > 0) {
    if (absl::Status s = replicator_->FetchMissing(job.job_id, k, num_layers, rank0_store);
        !s.ok()) {
      return absl::UnavailableError(s.message());
    }
  }
  return k;
}

void Agent::ReadProgress() {
  ReadRankLogs();
  const size_t local = run_.offsets.size();
  while (!run_.partial.empty() && run_.partial.begin()->second.size() == local) {
    const int it = run_.partial.begin()->first;
    std::map<int, IterationRecord> records = std::move(run_.partial.begin()->second);
    run_.partial.erase(run_.partial.begin());
    run_.completed = it + 1;
    NodeIteration n = CombineRecords(it, records);
    PublishIteration(&n);
    AccumulateReport(n, records);
  }
}

void Agent::ReadRankLogs() {
  for (auto& [rank, offset] : run_.offsets) {
    std::ifstream in(absl::StrCat(run_.dir, "/rank-", rank, ".jsonl"));
    if (!in) continue;
    in.seekg(static_cast<std::streamoff>(offset));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // a partial last line: read it next time
      offset += line.size() + 1;
      absl::StatusOr<IterationRecord> r = ParseIterationRecord(line);
      if (r.ok()) run_.partial[r->iteration][rank] = std::move(*r);
    }
  }
}

NodeIteration Agent::CombineRecords(int it, const std::map<int, IterationRecord>& records) const {
  const size_t local = run_.offsets.size();
  NodeIteration n;
  n.job_id = run_.job_id;
  n.version = run_.version;
  n.iteration = it;
  double busy = 0;
  for (const auto& [rank, r] : records) {
    n.wall_s = std::max(n.wall_s, r.wall_s);
    n.checkpoint_s = std::max(n.checkpoint_s, r.checkpoint_s);
    n.overhead_s = std::max(n.overhead_s, r.overhead_s);
  }
  for (const auto& [rank, r] : records) {
    busy += r.busy_s;
    if (r.has_loss) {
      n.has_loss = true;
      n.loss = r.loss;
    }
    auto reported = run_.report_device.find(rank);
    if (reported == run_.report_device.end()) continue;  // not pipeline 0's replica 0
    for (const auto& [key, sum] : r.ops) {
      n.ops[key].seconds += sum.seconds;
      n.ops[key].samples += sum.samples;
      if (key.second != "S" && key.second != "T") n.stage_device[key.first] = reported->second;
    }
    for (const auto& [key, sum] : r.layer_ops) {
      n.layer_ops[key].seconds += sum.seconds;
      n.layer_ops[key].samples += sum.samples;
    }
  }
  for (const auto& [rank, r] : records) {
    n.rank_bubble[rank] = n.wall_s > 0 ? 1 - r.busy_s / n.wall_s : 0;
  }
  n.local_bubble = n.wall_s > 0 ? 1 - busy / (static_cast<double>(local) * n.wall_s) : 0;
  n.tokens_per_s = n.wall_s > 0 ? run_.tokens_per_iteration / n.wall_s : 0;
  return n;
}

void Agent::PublishIteration(NodeIteration* n) {
  run_.progress.iteration = run_.completed;
  run_.progress.tokens_per_s = n->tokens_per_s;
  if (n->has_loss) {
    run_.progress.has_loss = true;
    run_.progress.loss = n->loss;
  }
  std::pair<double, double>& o = overhead_[run_.job_id];
  o.first += n->overhead_s;
  o.second += n->wall_s;
  n->mean_overhead_ratio = o.second > 0 ? o.first / o.second : 0;
  if (observer_) observer_->OnIteration(*n);
  if (switching_job_ == run_.job_id && run_.version != switching_from_) {
    const double switch_s = clock_.NowSeconds() - switch_seen_s_;
    if (observer_) observer_->OnPlanSwitch(run_.job_id, switch_s);
    spdlog::info("agent {}: plan switch of job {} to v{} took {:.3f}s", options_.node, run_.job_id,
                 run_.version, switch_s);
    switching_job_.clear();
  }
}

void Agent::AccumulateReport(const NodeIteration& n,
                             const std::map<int, IterationRecord>& records) {
  if (run_.iterations_seen++ <= 0) return;  // the run's first iteration warms up
  for (const auto& [key, sum] : n.ops) {
    run_.unreported[key].seconds += sum.seconds;
    run_.unreported[key].samples += sum.samples;
  }
  for (const auto& [key, sum] : n.layer_ops) {
    run_.unreported_layers[key].seconds += sum.seconds;
    run_.unreported_layers[key].samples += sum.samples;
  }
  for (const auto& [rank, r] : records) {
    auto reported = run_.report_device.find(rank);
    if (reported == run_.report_device.end()) continue;
    DeviceBusyReport& d = run_.unreported_devices[reported->second];
    d.busy_s += r.busy_s;
    d.iteration_s += r.wall_s;
    ++d.iterations;
  }
  if (report_pacer_.Due(run_.iterations_seen - 1, clock_.NowSeconds())) ReportTimes();
}

void Agent::ReportTimes() {
  // A device the plan leaves without ops still reports its (zero) busy time.
  if (run_.unreported.empty() && run_.unreported_devices.empty()) return;
  std::vector<StageTimeReport> times;
  for (const auto& [key, sum] : run_.unreported) {
    if (sum.samples == 0) continue;
    times.push_back({key.first, key.second, sum.seconds / sum.samples, sum.samples});
  }
  std::vector<LayerTimeReport> layer_times;
  for (const auto& [key, sum] : run_.unreported_layers) {
    if (sum.samples == 0) continue;
    layer_times.push_back({key.first, key.second, sum.seconds / sum.samples, sum.samples});
  }
  std::vector<DeviceBusyReport> device_times;
  for (const auto& [device, sum] : run_.unreported_devices) {
    if (sum.iterations == 0 || !(sum.iteration_s > 0)) continue;
    device_times.push_back({device, sum.busy_s / sum.iterations, sum.iteration_s / sum.iterations,
                            sum.iterations});
  }
  run_.unreported.clear();
  run_.unreported_layers.clear();
  run_.unreported_devices.clear();
  absl::Status s = link_->ReportStageTimes(run_.job_id, run_.version, options_.node, times,
                                           layer_times, device_times, run_.progress);
  if (!s.ok()) spdlog::warn("agent {}: cannot report stage times: {}", options_.node, std::string(s.message()));
}

void Agent::FinishRun(const std::vector<RankOutcome>& outcomes) {
  ReadProgress();
  ReportTimes();
  const RankOutcome* failed = nullptr;
  bool stopped = false, completed = true;
  int reached = run_.completed;
  for (const RankOutcome& o : outcomes) {
    if (!o.ok && failed == nullptr) failed = &o;
    stopped = stopped || o.stopped;
    completed = completed && o.ok && !o.stopped && o.completed_iterations >= run_.job.iterations;
    reached = std::max(reached, o.completed_iterations);
  }
  ran_[run_.job_id] = run_.version;  // unless restarted below
  ReportSnapshots(outcomes);
  if (!run_.lost.empty()) {
    Event(run_.job_id, {JobEventKind::kRankFailed, "", run_.version, reached,
                        absl::StrCat(run_.lost, " lost with its node (a newer plan version "
                                                "leaves it out)")});
  } else if (run_.abandoned) {
    if (run_.holds_rank0) {
      Event(run_.job_id, {JobEventKind::kStopped, "", run_.version, reached,
                          "superseded before its first iteration: stopped at once"});
    }
  } else if (failed != nullptr) {
    const bool restart = !run_.superseded && run_.restart < options_.max_rank_restarts;
    if (restart) {
      ran_[run_.job_id] = run_.version - 1;
      restarts_[run_.job_id] = {run_.version, run_.restart + 1};
    }
    Event(run_.job_id,
          {JobEventKind::kRankFailed, "", run_.version, reached,
           absl::StrCat("rank ", failed->rank, ": ", failed->error,
                        restart ? absl::StrCat("; restarting from the last checkpoint (restart ",
                                               run_.restart + 1, " of ",
                                               options_.max_rank_restarts, ")")
                                : run_.superseded
                                      ? std::string("; a newer plan version follows")
                                      : std::string("; out of restarts: waiting for a new "
                                                    "plan version"))});
  } else if (completed) {
    done_jobs_.insert(run_.job_id);
    if (run_.holds_rank0) {
      Event(run_.job_id, {JobEventKind::kCompleted, "", run_.version, reached, ""});
    }
  } else if (stopped) {
    constexpr double kWaitForPeersS = 3;
    expected_checkpoint_[run_.job_id] = {reached, clock_.NowSeconds() + kWaitForPeersS};
    if (run_.holds_rank0) {
      Event(run_.job_id, {JobEventKind::kStopped, "", run_.version, reached,
                          "stopped at an iteration boundary for a new plan version"});
    }
  }
  std::error_code ec;
  fs::remove_all(run_.dir, ec);  // its outcome is reported; rank logs went to the agent's stderr
  run_ = ActiveRun();
  report_pacer_.Restart();
  SetState(registered_ ? AgentState::kWatching : AgentState::kRegistering);
}

void Agent::ReportSnapshots(const std::vector<RankOutcome>& outcomes) {
  std::map<int, std::vector<int>> ranks;  // iteration -> local ranks that saved it
  int layers = 0;
  for (const RankOutcome& o : outcomes) {
    if (o.snapshot_iteration < 0) continue;
    ranks[o.snapshot_iteration].push_back(o.rank);
    layers += o.snapshot_layers;
  }
  for (const auto& [iteration, saved_by] : ranks) {
    Event(run_.job_id,
          {JobEventKind::kStateSaved, "", run_.version, iteration,
           absl::StrCat("rank(s) ", absl::StrJoin(saved_by, ", "), " hold their state of iteration ",
                        iteration, " in ", layers,
                        " layer file(s), saved from memory after the failure or already in that "
                        "iteration's checkpoint (the survivors resume from it)")});
  }
}

bool Agent::RunProgressed() const {
  for (const auto& [rank, offset] : run_.offsets) {
    if (offset > 0) return true;
  }
  return !run_.partial.empty();
}

// "rank 1 (node-b)" for each plan device of `slots` on a node `newer` leaves out; "" if none.
static std::string LostRanks(const std::vector<DeviceSlot>& slots, const AgentJob& newer) {
  std::set<std::string> kept;
  for (const DeviceSlot& s : newer.slots) kept.insert(s.node);
  std::string out;
  for (size_t d = 0; d < slots.size(); ++d) {
    if (kept.count(slots[d].node)) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", "rank ", d, " (", slots[d].node, ")");
  }
  return out;
}

void Agent::LeaveSupersededRun(const AgentJob* newer) {
  if (newer != nullptr && newer->reason == "node_failure" && run_.lost.empty()) {
    run_.lost = LostRanks(run_.job.slots, *newer);
  }
  // Peers lost after progress: the ranks fail on their own within the transport timeout,
  // saving the state of the last completed iteration from memory as they go
  // (TrainOptions::snapshot_on_failure); only those still running after it (and a grace for
  // that write) are killed.
  const bool progressed = RunProgressed();
  const double now_s = clock_.NowSeconds();
  if (!run_.lost.empty() && progressed && run_.kill_at_s < 0) {
    constexpr double kSnapshotGraceS = 2;
    run_.kill_at_s = now_s + options_.transport_timeout_s + kSnapshotGraceS;
  }
  const bool kill = !progressed || (!run_.lost.empty() && now_s >= run_.kill_at_s);
  if (!run_.superseded) {
    spdlog::info("agent {}: job {} moved on from v{}: {}", options_.node, run_.job_id,
                 run_.version,
                 !run_.lost.empty() && progressed
                     ? "its peers were lost; its ranks save their state as they fail"
                 : kill ? "no iteration done yet, stopping at once"
                        : "stopping at the iteration boundary");
  }
  if (!run_.superseded) {
    switching_job_ = run_.job_id;
    switching_from_ = run_.version;
    switch_seen_s_ = clock_.NowSeconds();
  }
  run_.superseded = true;
  SetState(AgentState::kSwitching);
  if (kill) {
    // Still meeting its peers (or loading): nothing to save, and a peer may be waiting for
    // this node's ranks of the newer version. Or a peer is gone and the ranks are still
    // blocked past the transport timeout.
    run_.abandoned = run_.abandoned || run_.lost.empty();
    launcher_->KillAll();
  } else if (!run_.lost.empty()) {
    // Waiting for the ranks to fail (see above); no clean stop is possible.
  } else {
    launcher_->RequestStop();  // only acts where rank 0 runs; repeated until it stops
  }
}

void Agent::FollowJobs(double now_s) {
  // The planner is asked at most every kJobPollS, and not while it is being backed off from:
  // then the last known jobs stand (running ranks are not disturbed).
  constexpr double kJobPollS = 0.2;
  absl::StatusOr<std::vector<AgentJob>> jobs = absl::UnavailableError("not polled");
  if (backoff_s_ == 0 && now_s >= next_jobs_poll_s_) {
    next_jobs_poll_s_ = now_s + kJobPollS;
    jobs = link_->AgentJobs();
    if (jobs.ok()) {
      jobs_ = std::move(*jobs);
      for (AgentJob& j : jobs_) {
        if (j.layout.pipelines.empty()) j.layout = SinglePipelineLayout(j.plan);
      }
    }
  }
  if (state_ == AgentState::kRunning || state_ == AgentState::kSwitching) {
    ReadProgress();
    if (auto outcomes = launcher_->Poll(); outcomes.has_value()) {
      FinishRun(*outcomes);
    } else if (jobs.ok()) {
      const AgentJob* listed = nullptr;
      for (const AgentJob& j : jobs_) {
        if (j.job_id == run_.job_id) listed = &j;
      }
      if (listed == nullptr || listed->version != run_.version) LeaveSupersededRun(listed);
    }
  }
  if (state_ == AgentState::kWatching && registered_ && !leaving_) {
    if (const AgentJob* target = Target(); target != nullptr) {
      const AgentJob job = *target;
      absl::Status s = StartRun(job);
      if (!s.ok()) {
        // kUnavailable: waiting on a peer, tried again on the next pass.
        spdlog::log(absl::IsUnavailable(s) ? spdlog::level::debug : spdlog::level::warn,
                    "agent {}: cannot start job {} v{}: {}", options_.node, job.job_id,
                    job.version, std::string(s.message()));
      }
    }
  }
}

double Agent::Tick() {
  const double now_s = clock_.NowSeconds();
  KeepRegistered(now_s);
  FollowJobs(now_s);
  const double poll = state_ == AgentState::kRunning || state_ == AgentState::kSwitching ? 0.05
                                                                                         : 0.1;
  return std::min(poll, std::max(0.0, next_contact_s_ - now_s));
}

void Agent::Run(const std::atomic<bool>& stop) {
  while (!stop.load() && !left()) {
    const double wait = Tick();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(wait, 0.01)));
  }
  launcher_->KillAll();
  while (launcher_->active() && !launcher_->Poll().has_value()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace octopipe::agent

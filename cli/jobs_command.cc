#include "cli/jobs_command.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/planner_client.h"
#include "core/leader_hint.h"
#include "cli/table.h"
#include "core/layout_plan.h"
#include "core/convert.h"

namespace octopipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: octopipe jobs SUBCOMMAND --planner=HOST:PORT [flags]\n"
    "\n"
    "subcommands:\n"
    "  create   --model=... --cluster=... [--name --devices | --pp --tp --ep --dp]\n"
    "           [--microbatches --time_budget --vocab_parallel --iterations\n"
    "           --checkpoint_interval]\n"
    "  list\n"
    "  get      --job=ID\n"
    "  delete   --job=ID\n"
    "  watch    --job=ID [--after=VERSION] [--count=N] [--events]  print plan versions (and\n"
    "           events) as they come\n"
    "\n"
    "Run `octopipe jobs SUBCOMMAND --help` for every flag.\n";

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe jobs: error: " << s.message() << "\n";
  return code;
}

const char* StateName(proto::JobState s) {
  switch (s) {
    case proto::JOB_STATE_PLANNING: return "planning";
    case proto::JOB_STATE_READY: return "ready";
    case proto::JOB_STATE_INFEASIBLE: return "infeasible";
    case proto::JOB_STATE_FAILED: return "failed";
    default: return "unknown";
  }
}

const char* PhaseName(proto::JobPhase p) {
  switch (p) {
    case proto::JOB_PHASE_PLANNING: return "planning";
    case proto::JOB_PHASE_PENDING: return "pending";
    case proto::JOB_PHASE_RUNNING: return "running";
    case proto::JOB_PHASE_COMPLETED: return "completed";
    case proto::JOB_PHASE_FAILED: return "failed";
    default: return "-";
  }
}

// "iteration 1000/1000, loss 0.6755, 12,345 tokens/s" for a job agents train; "-" otherwise.
std::string ProgressText(const proto::Job& j) {
  if (!j.has_training()) return "-";
  const proto::JobProgress& p = j.progress();
  std::string out = absl::StrCat("iteration ", p.iteration(), "/", p.total_iterations());
  if (p.has_loss()) absl::StrAppend(&out, absl::StrFormat(", loss %.6g", p.loss()));
  if (p.tokens_per_s() > 0) absl::StrAppend(&out, absl::StrFormat(", %.0f tokens/s", p.tokens_per_s()));
  return out;
}

// The version's reason in its text form ("node_failure"); a reason this binary does not know
// shows as its number.
std::string ReasonText(const proto::PlanVersion& v) {
  absl::StatusOr<ReplanReason> r = ReplanReasonFromProto(v.reason_kind());
  return r.ok() ? std::string(ReplanReasonName(*r))
                : absl::StrCat("reason ", static_cast<int>(v.reason_kind()));
}

// "JOB vN (REASON): S stages on D devices, iteration T, bubble B"; a layout version says its
// layout, ranks and whole iteration first, then pipeline 0's stages:
// "JOB vN (REASON): layout PP2 x TP1 x EP1 x DP2 (pp outer) on 4 ranks, iteration T;
// pipeline 0: S stages on D devices, bubble B".
std::string VersionLine(const proto::PlanVersion& v) {
  const proto::Prediction& p = v.result().plan().predicted();
  const char* infeasible = v.result().feasible() ? "" : " [INFEASIBLE]";
  if (v.result().has_layout_plan()) {
    const proto::LayoutPlan& l = v.result().layout_plan();
    const proto::ParallelLayoutSpec& d = l.layout();
    ParallelLayout layout;
    layout.pp = d.pp();
    layout.tp = d.tp();
    layout.ep = d.ep();
    layout.dp = d.dp();
    layout.pp_outer = d.rank_order() != "tp-pp-dp";
    return absl::StrFormat(
        "%s v%d (%s): layout %s on %d ranks, iteration %s; pipeline 0: %d stages on %d devices, "
        "bubble %s%s",
        v.job_id(), v.version(), ReasonText(v), layout.ToString(), l.num_ranks(),
        FormatSeconds(l.predicted().iteration_time_s()), v.result().plan().stages_size(),
        v.result().plan().num_devices(), FormatPercent(p.bubble_ratio()), infeasible);
  }
  return absl::StrFormat("%s v%d (%s): %d stages on %d devices, iteration %s, bubble %s%s",
                         v.job_id(), v.version(), ReasonText(v), v.result().plan().stages_size(),
                         v.result().plan().num_devices(), FormatSeconds(p.iteration_time_s()),
                         FormatPercent(p.bubble_ratio()), infeasible);
}

// After a node loss, the ways to go on the planner compared (PlanResult.node_loss_options), a
// line each: "  option drop replicas (1 of 2 replicas go on, ...): iteration T, switch S,
// done in D for the N iterations left [chosen]", or "  option new layout: not offered (why)";
// "" when there were none.
std::string NodeLossLines(const proto::PlanVersion& v) {
  std::string out;
  for (const proto::NodeLossOption& o : v.result().node_loss_options()) {
    if (!o.not_offered().empty()) {
      absl::StrAppend(&out, "  option ", o.kind(), ": not offered (", o.not_offered(), ")\n");
      continue;
    }
    absl::StrAppend(&out, "  option ", o.kind(), " (", o.summary(), "): iteration ",
                    FormatSeconds(o.iteration_time_s()), ", switch ",
                    FormatSeconds(o.switch_s()), ", done in ", FormatSeconds(o.total_s()),
                    " for the ", o.remaining_iterations(), " iterations left",
                    o.chosen() ? " [chosen]" : "", "\n");
  }
  return out;
}

// Flags of every jobs subcommand (each declares the ones it takes).
struct JobsOptions {
  PlannerConnection remote;
  std::string model, cluster, name, job, vocab_parallel;
  int64_t devices = 0, microbatches = 0, after = 0, count = 0;
  int64_t iterations = 0, checkpoint_interval = 0;
  int64_t pp = 0, tp = 0, ep = 0, dp = 0;
  double time_budget = 0;
  bool json = false, events = false;
};

void DeclareFlags(const std::string& sub, CommandLine& flags, JobsOptions& o) {
  o.remote.AddFlags(flags);
  flags.Bool("json", &o.json, "print protobuf JSON instead of a summary");
  if (sub == "create") {
    AddModelClusterFlags(flags, &o.model, &o.cluster);
    flags.String("name", &o.name, "job name (none: its id)");
    flags.Int("devices", &o.devices,
              "one pipeline over this many devices; 0 = every device, the planner choosing\n"
              "the layout (PP x TP x EP x DP)");
    for (auto [name, dest] : {std::pair{"pp", &o.pp}, std::pair{"tp", &o.tp},
                              std::pair{"ep", &o.ep}, std::pair{"dp", &o.dp}}) {
      flags.Int(name, dest,
                absl::StrCat("fix the layout's ", absl::AsciiStrToUpper(name),
                             " degree (0: chosen; not with --devices). After a node is lost\n"
                             "the planner keeps it where the devices left allow, else chooses"));
    }
    flags.Int("microbatches", &o.microbatches, "micro-batches; 0 = the model's");
    flags.Double("time_budget", &o.time_budget, "tuning seconds; 0 = the planner's default");
    flags.String("vocab_parallel", &o.vocab_parallel,
                 "split the output layer over the devices by vocabulary: auto (the planner's\n"
                 "default: tried when the head is heavy, the faster plan kept), on or off");
    flags.Int("iterations", &o.iterations,
              "> 0: worker agents (octopipe-agent) train the job for this many iterations;\n"
              "needs --model=ref:... (the executor's reference model). 0: planning only");
    flags.Int("checkpoint_interval", &o.checkpoint_interval,
              "with --iterations: agents checkpoint every this many iterations (0: only at\n"
              "plan switches and drains)");
  }
  if (sub == "get" || sub == "delete" || sub == "watch") flags.String("job", &o.job, "job id");
  if (sub == "watch") {
    flags.Int("after", &o.after, "print versions newer than this (0: the current one first)");
    flags.Int("count", &o.count, "exit after this many versions (0: until interrupted)");
    flags.Bool("events", &o.events,
               "also print the job's events as agents report them (started, rank_failed,\n"
               "resumed, completed, ...), one line each: \"JOB event KIND (vN, iteration T, ...)\"");
  }
}

int Create(const JobsOptions& o, PlannerClient& planner, std::ostream& out,
           std::ostream& err) {
  if (o.model.empty() || o.cluster.empty()) {
    return Fail(err, absl::InvalidArgumentError("--model and --cluster are required"), 2);
  }
  absl::StatusOr<ModelGraph> model = LoadModelArg(o.model);
  if (!model.ok()) return Fail(err, model.status(), 2);
  absl::StatusOr<Cluster> cluster = LoadClusterArg(o.cluster);
  if (!cluster.ok()) return Fail(err, cluster.status(), 2);
  proto::CreateJobRequest req;
  req.set_name(o.name);
  *req.mutable_model() = ModelToProto(*model);
  *req.mutable_cluster() = ClusterToProto(*cluster);
  for (auto [name, value] : {std::pair{"pp", o.pp}, std::pair{"tp", o.tp},
                             std::pair{"ep", o.ep}, std::pair{"dp", o.dp}}) {
    if (value < 0 || value > 4096) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                           "--", name, " must be in [0, 4096] (0: chosen), got ", value)), 2);
    }
    if (value > 0 && o.devices > 0) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                           "--", name, "=", value, ": --devices=", o.devices,
                           " asks for one pipeline; leave it out to fix the layout")), 2);
    }
  }
  if (o.devices < 0) {
    return Fail(err, absl::InvalidArgumentError(
                         absl::StrCat("--devices must be >= 0, got ", o.devices)), 2);
  }
  req.mutable_options()->set_num_devices(static_cast<int>(o.devices));
  req.mutable_options()->set_layout_pp(static_cast<int>(o.pp));
  req.mutable_options()->set_layout_tp(static_cast<int>(o.tp));
  req.mutable_options()->set_layout_ep(static_cast<int>(o.ep));
  req.mutable_options()->set_layout_dp(static_cast<int>(o.dp));
  if (o.pp > 0 || o.tp > 0 || o.ep > 0 || o.dp > 0) req.mutable_options()->set_choose_layout(true);
  req.mutable_options()->set_num_microbatches(static_cast<int>(o.microbatches));
  req.mutable_options()->set_time_budget_s(o.time_budget);
  absl::StatusOr<VocabParallelMode> vocab = ParseVocabParallelMode(o.vocab_parallel);
  if (!vocab.ok()) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat("--", vocab.status().message())), 2);
  }
  req.mutable_options()->set_vocab_parallel(VocabParallelToProto(*vocab));
  if (o.iterations < 0 || o.checkpoint_interval < 0) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                         "--iterations and --checkpoint_interval must be >= 0, got ",
                         o.iterations, " and ", o.checkpoint_interval)), 2);
  }
  if (o.iterations > 0) {
    if (o.model.rfind("ref:", 0) != 0) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                           "--iterations: agents train only the reference model (--model=ref:...), "
                           "got --model=", o.model)), 2);
    }
    proto::AgentTraining* t = req.mutable_training();
    t->set_reference_model(o.model);
    t->set_iterations(o.iterations);
    t->set_checkpoint_interval(o.checkpoint_interval);
  }
  proto::Job created;
  grpc::Status s = planner.Call(PlannerClient::Route::kLeader, &proto::Planner::Stub::CreateJob,
                                req, &created, /*idempotent=*/false);
  if (!s.ok()) return Fail(err, FromGrpc(s), 1);
  out << (o.json ? ProtoToJson(created)
                 : absl::StrCat("created ", created.id(), " (", created.name(), "), planning"))
      << "\n";
  return 0;
}

int List(const JobsOptions& o, PlannerClient& planner, std::ostream& out,
         std::ostream& err) {
  proto::ListJobsResponse resp;
  grpc::Status s = planner.Call(PlannerClient::Route::kAny, &proto::Planner::Stub::ListJobs,
                                proto::ListJobsRequest(), &resp);
  if (!s.ok()) return Fail(err, FromGrpc(s), 1);
  // Every page of summaries (the planner pages the list; see ListJobsRequest).
  while (!resp.next_page_token().empty()) {
    proto::ListJobsRequest next;
    next.set_page_token(resp.next_page_token());
    proto::ListJobsResponse page;
    s = planner.Call(PlannerClient::Route::kAny, &proto::Planner::Stub::ListJobs, next, &page);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    for (proto::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
    resp.set_next_page_token(page.next_page_token());
  }
  if (o.json) {
    out << ProtoToJson(resp) << "\n";
    return 0;
  }
  TextTable t({"job", "name", "phase", "state", "version", "progress", "model",
               "excluded nodes"});
  for (const proto::Job& j : resp.jobs()) {
    t.AddRow({j.id(), j.name(), PhaseName(j.phase()), StateName(j.state()),
              absl::StrCat(j.current_version()), ProgressText(j), j.model().name(),
              absl::StrJoin(j.excluded_nodes(), ",")});
  }
  out << t.Render();
  return 0;
}

int Get(const JobsOptions& o, PlannerClient& planner, std::ostream& out,
        std::ostream& err) {
  proto::GetJobRequest req;
  req.set_job_id(o.job);
  proto::GetJobResponse resp;
  grpc::Status s =
      planner.Call(PlannerClient::Route::kAny, &proto::Planner::Stub::GetJob, req, &resp);
  if (!s.ok()) return Fail(err, FromGrpc(s), 1);
  if (o.json) {
    out << ProtoToJson(resp) << "\n";
    return 0;
  }
  const proto::Job& job = resp.job();
  out << job.id() << " (" << job.name() << "): " << PhaseName(job.phase()) << " (plan "
      << StateName(job.state()) << ")"
      << (job.last_error().empty() ? "" : ", " + job.last_error()) << "\n";
  if (job.has_training()) out << "progress: " << ProgressText(job) << "\n";
  if (resp.has_current()) out << VersionLine(resp.current()) << "\n" << NodeLossLines(resp.current());
  // The newest events (the planner keeps 200), oldest of them first.
  constexpr int kShownEvents = 5;
  const int first = std::max(0, job.events_size() - kShownEvents);
  for (int i = first; i < job.events_size(); ++i) {
    const proto::JobEvent& e = job.events(i);
    out << "event: " << e.kind() << " (v" << e.plan_version() << ", iteration " << e.iteration()
        << (e.node_id().empty() ? "" : ", node " + e.node_id()) << ")"
        << (e.message().empty() ? "" : ": " + e.message()) << "\n";
  }
  return 0;
}

int Delete(const JobsOptions& o, PlannerClient& planner, std::ostream& out,
           std::ostream& err) {
  proto::DeleteJobRequest req;
  req.set_job_id(o.job);
  proto::DeleteJobResponse resp;
  grpc::Status s = planner.Call(PlannerClient::Route::kLeader, &proto::Planner::Stub::DeleteJob,
                                req, &resp, /*idempotent=*/false);
  if (!s.ok()) return Fail(err, FromGrpc(s), 1);
  out << "deleted " << o.job << "\n";
  return 0;
}

// Prints plan versions as the planner publishes them, until --count or the stream ends.
int Watch(const JobsOptions& o, PlannerClient& planner, std::ostream& out,
          std::ostream& err) {
  if (o.count < 0 || o.after < 0) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                         "--count and --after must be >= 0, got ", o.count, " and ", o.after)), 2);
  }
  // Any replica answers a watch (followers from the store). When the stream breaks because
  // its replica went away, the watch goes on at the next reachable replica after the last
  // version printed (events reported meanwhile are in `jobs get`).
  int64_t seen = 0, last_version = o.after;
  size_t replica = planner.current();
  bool watched = false;     // some stream delivered something (the address is a planner)
  double quiet_backoff_s = 0;  // between streams that ended delivering nothing
  while (true) {
    std::unique_ptr<grpc::ClientContext> watch_ctx = planner.StreamContext();  // no deadline
    proto::WatchPlanRequest req;
    req.set_job_id(o.job);
    req.set_after_version(last_version);
    req.set_include_events(o.events);
    auto reader = planner.stub(replica).WatchPlan(watch_ctx.get(), req);
    proto::PlanVersion v;
    bool delivered = false;
    while (reader->Read(&v)) {
      delivered = watched = true;
      if (v.has_event()) {  // --events: "JOB event KIND (vN, iteration T, node N): MESSAGE"
        const proto::JobEvent& e = v.event();
        out << (o.json ? ProtoToJson(v)
                       : absl::StrCat(v.job_id(), " event ", e.kind(), " (v", e.plan_version(),
                                      ", iteration ", e.iteration(),
                                      e.node_id().empty() ? "" : ", node " + e.node_id(), ")",
                                      e.message().empty() ? "" : ": " + e.message()))
            << std::endl;
        continue;  // --count counts versions
      }
      last_version = std::max(last_version, v.version());
      out << (o.json ? ProtoToJson(v) : VersionLine(v) + "\n" + NodeLossLines(v)) << std::flush;
      if (o.json) out << std::endl;
      if (o.count > 0 && ++seen >= o.count) {
        watch_ctx->TryCancel();
        return 0;
      }
    }
    grpc::Status s = reader->Finish();
    if (s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) return 0;
    // UNAVAILABLE: another replica, the leader a follower named, or — once a stream worked, so
    // that a mistyped address still fails at once — the same lone planner back from a restart
    // or a dns:/// name's new address (the client re-resolves), within the window. Streams that
    // end delivering nothing (a follower with no leader yet) are retried with back-off, for at
    // most the window.
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || (planner.size() < 2 && !watched)) {
      return Fail(err, FromGrpc(s), 1);
    }
    if (delivered) {
      quiet_backoff_s = 0;
    } else {
      quiet_backoff_s = quiet_backoff_s == 0 ? 0.1 : 2 * quiet_backoff_s;
      if (quiet_backoff_s > 10) return Fail(err, FromGrpc(s), 1);
      absl::SleepFor(absl::Seconds(std::min(1.0, quiet_backoff_s)));
    }
    const std::optional<size_t> next = planner.FailOver(replica, s);
    if (!next) return Fail(err, FromGrpc(s), 1);
    err << "octopipe jobs watch: the planner at " << planner.address(replica)
        << (LeaderNamedIn(s.error_message()) ? " is a follower" : " went away") << " ("
        << s.error_message() << "); watching on " << planner.address(*next) << " after v"
        << last_version << "\n";
    replica = *next;
  }
}

std::string Summary(const std::string& sub) {
  if (sub == "create") {
    return "Creates a job on the planner: it tunes a first plan in the background and re-plans "
           "from measured times and node changes (watch it with `octopipe jobs watch`).";
  }
  if (sub == "list") {
    return "Lists the planner's jobs with their phase, state, current version and progress.";
  }
  if (sub == "get") {
    return "Shows one job: its phase (planning, pending, running, completed, failed), progress, "
           "current plan version and newest events.";
  }
  if (sub == "delete") return "Deletes a job with its plan versions and calibration.";
  return "Prints the job's plan versions as the planner publishes them.";
}

using Subcommand = int (*)(const JobsOptions&, PlannerClient&, std::ostream&,
                           std::ostream&);

Subcommand FindSubcommand(const std::string& sub) {
  if (sub == "create") return Create;
  if (sub == "list") return List;
  if (sub == "get") return Get;
  if (sub == "delete") return Delete;
  if (sub == "watch") return Watch;
  return nullptr;
}

}  // namespace

int RunJobs(const std::vector<std::string>& all_args, std::ostream& out, std::ostream& err) {
  if (all_args.empty() || all_args[0] == "--help" || all_args[0] == "-h") {
    out << kUsage;
    return all_args.empty() ? 2 : 0;
  }
  const std::string sub = all_args[0];
  const Subcommand run = FindSubcommand(sub);
  if (run == nullptr) {
    err << "octopipe jobs: unknown subcommand '" << sub << "'\n\n" << kUsage;
    return 2;
  }
  JobsOptions o;
  CommandLine flags(absl::StrCat("jobs ", sub), Summary(sub));
  DeclareFlags(sub, flags, o);
  if (absl::Status s = flags.Parse({all_args.begin() + 1, all_args.end()}); !s.ok()) {
    return Fail(err, s, 2);
  }
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if ((sub == "get" || sub == "delete" || sub == "watch") && o.job.empty()) {
    return Fail(err, absl::InvalidArgumentError("--job: a job id is required"), 2);
  }
  auto planner = o.remote.Connect(&err);
  if (!planner.ok()) return Fail(err, planner.status(), 2);
  return run(o, **planner, out, err);
}

}  // namespace octopipe::cli

#include "cli/jobs_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/flags.h"
#include "cli/inputs.h"
#include "cli/planner_client.h"
#include "cli/table.h"
#include "core/convert.h"

namespace octopipe::cli {
namespace {

constexpr char kUsage[] =
    "usage: octopipe jobs SUBCOMMAND --planner=HOST:PORT [flags]\n"
    "\n"
    "subcommands:\n"
    "  create   --model=... --cluster=... [--name --devices --microbatches --time-budget]\n"
    "  list\n"
    "  get      --job=ID\n"
    "  delete   --job=ID\n"
    "  watch    --job=ID [--after=VERSION] [--count=N]  print plan versions as they come\n"
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

std::string VersionLine(const proto::PlanVersion& v) {
  const proto::Prediction& p = v.result().plan().predicted();
  return absl::StrFormat("%s v%d (%s): %d stages on %d devices, iteration %s, bubble %s%s",
                         v.job_id(), v.version(), v.reason(), v.result().plan().stages_size(),
                         v.result().plan().num_devices(), FormatSeconds(p.iteration_time_s()),
                         FormatPercent(p.bubble_ratio()),
                         v.result().feasible() ? "" : " [INFEASIBLE]");
}

}  // namespace

int RunJobs(const std::vector<std::string>& all_args, std::ostream& out, std::ostream& err) {
  if (all_args.empty() || all_args[0] == "--help" || all_args[0] == "-h") {
    out << kUsage;
    return all_args.empty() ? 2 : 0;
  }
  const std::string sub = all_args[0];
  const std::vector<std::string> args(all_args.begin() + 1, all_args.end());
  if (sub != "create" && sub != "list" && sub != "get" && sub != "delete" && sub != "watch") {
    err << "octopipe jobs: unknown subcommand '" << sub << "'\n\n" << kUsage;
    return 2;
  }
  PlannerConnection remote;
  std::string model_spec, cluster_spec, name, job;
  int64_t devices = 0, microbatches = 0, after = 0, count = 0;
  double budget = 0;
  bool json = false;
  FlagSet flags(absl::StrCat("jobs ", sub), "Manage jobs on a running octopipe-planner.");
  remote.AddFlags(flags);
  flags.Bool("json", &json, "print protobuf JSON instead of a summary");
  if (sub == "create") {
    AddModelClusterFlags(flags, &model_spec, &cluster_spec);
    flags.String("name", &name, "job name (default: its id)");
    flags.Int("devices", &devices, "pipeline devices; 0 = all");
    flags.Int("microbatches", &microbatches, "micro-batches; 0 = the model's");
    flags.Double("time-budget", &budget, "tuning seconds; 0 = the planner's default");
  }
  if (sub == "get" || sub == "delete" || sub == "watch") flags.String("job", &job, "job id");
  if (sub == "watch") {
    flags.Int("after", &after, "print versions newer than this (0: the current one first)");
    flags.Int("count", &count, "exit after this many versions (0: until interrupted)");
  }
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if ((sub == "get" || sub == "delete" || sub == "watch") && job.empty()) {
    return Fail(err, absl::InvalidArgumentError("--job: a job id is required"), 2);
  }
  auto stub = remote.Connect();
  if (!stub.ok()) return Fail(err, stub.status(), 2);
  auto ctx = remote.Context();

  if (sub == "create") {
    if (model_spec.empty() || cluster_spec.empty()) {
      return Fail(err, absl::InvalidArgumentError("--model and --cluster are required"), 2);
    }
    absl::StatusOr<ModelGraph> model = LoadModelArg(model_spec);
    if (!model.ok()) return Fail(err, model.status(), 2);
    absl::StatusOr<Cluster> cluster = LoadClusterArg(cluster_spec);
    if (!cluster.ok()) return Fail(err, cluster.status(), 2);
    proto::CreateJobRequest req;
    req.set_name(name);
    *req.mutable_model() = ModelToProto(*model);
    *req.mutable_cluster() = ClusterToProto(*cluster);
    req.mutable_options()->set_num_devices(static_cast<int>(devices));
    req.mutable_options()->set_num_microbatches(static_cast<int>(microbatches));
    req.mutable_options()->set_time_budget_s(budget);
    proto::Job created;
    grpc::Status s = (*stub)->CreateJob(ctx.get(), req, &created);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    out << (json ? ProtoToJson(created) : absl::StrCat("created ", created.id(), " (",
                                                       created.name(), "), planning"))
        << "\n";
    return 0;
  }
  if (sub == "list") {
    // Every page of summaries (the planner pages the list; see ListJobsRequest).
    proto::ListJobsResponse resp;
    grpc::Status s = (*stub)->ListJobs(ctx.get(), proto::ListJobsRequest(), &resp);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    while (!resp.next_page_token().empty()) {
      proto::ListJobsRequest next;
      next.set_page_token(resp.next_page_token());
      proto::ListJobsResponse page;
      auto page_ctx = remote.Context();
      s = (*stub)->ListJobs(page_ctx.get(), next, &page);
      if (!s.ok()) return Fail(err, FromGrpc(s), 1);
      for (proto::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
      resp.set_next_page_token(page.next_page_token());
    }
    if (json) {
      out << ProtoToJson(resp) << "\n";
      return 0;
    }
    TextTable t({"job", "name", "state", "version", "model", "excluded nodes"});
    for (const proto::Job& j : resp.jobs()) {
      std::string excluded;
      for (const std::string& n : j.excluded_nodes()) absl::StrAppend(&excluded, excluded.empty() ? "" : ",", n);
      t.AddRow({j.id(), j.name(), StateName(j.state()), absl::StrCat(j.current_version()),
                j.model().name(), excluded});
    }
    out << t.Render();
    return 0;
  }
  if (sub == "get") {
    proto::GetJobRequest req;
    req.set_job_id(job);
    proto::GetJobResponse resp;
    grpc::Status s = (*stub)->GetJob(ctx.get(), req, &resp);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    if (json) {
      out << ProtoToJson(resp) << "\n";
    } else {
      out << resp.job().id() << " (" << resp.job().name() << "): " << StateName(resp.job().state())
          << (resp.job().last_error().empty() ? "" : ", " + resp.job().last_error()) << "\n";
      if (resp.has_current()) out << VersionLine(resp.current()) << "\n";
    }
    return 0;
  }
  if (sub == "delete") {
    proto::DeleteJobRequest req;
    req.set_job_id(job);
    proto::DeleteJobResponse resp;
    grpc::Status s = (*stub)->DeleteJob(ctx.get(), req, &resp);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    out << "deleted " << job << "\n";
    return 0;
  }
  // watch
  grpc::ClientContext watch_ctx;  // no deadline: watches run until interrupted
  if (!remote.token.empty()) watch_ctx.AddMetadata("authorization", "Bearer " + remote.token);
  proto::WatchPlanRequest req;
  req.set_job_id(job);
  req.set_after_version(after);
  auto reader = (*stub)->WatchPlan(&watch_ctx, req);
  proto::PlanVersion v;
  int64_t seen = 0;
  while (reader->Read(&v)) {
    out << (json ? ProtoToJson(v) : VersionLine(v)) << std::endl;
    if (count > 0 && ++seen >= count) {
      watch_ctx.TryCancel();
      return 0;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) return Fail(err, FromGrpc(s), 1);
  return 0;
}

}  // namespace octopipe::cli

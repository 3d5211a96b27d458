// Fuzz-style robustness test: a fixed number of random and mutated requests, from a
// seeded generator, sent over loopback to the REAL octopipe-planner process. Asserts for every
// call: an answer within its deadline + 1 s, and only a documented status code; and at the end
// that the process never crashed (it still serves, then exits cleanly on SIGTERM).
//
// Requests start from valid ones and get 1-3 mutations chosen through protobuf reflection
// (extreme integers, non-finite and huge/tiny doubles, empty and long strings, unknown enum
// numbers, duplicated or dropped repeated entries); some are raw random bytes sent with the
// generic stub (undecodable protobuf).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_zoo.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

namespace octopipe {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";
constexpr int kCases = 160;
constexpr uint64_t kSeed = 20261201;
constexpr double kDeadlineS = 3;

// One scalar (or repeated element, index >= 0) the mutator may change.
struct Slot {
  Message* message;
  const FieldDescriptor* field;
  int index;  // -1: singular
};

void CollectSlots(Message* m, std::vector<Slot>* scalars, std::vector<Slot>* repeated,
                  int depth) {
  const Reflection* r = m->GetReflection();
  const auto* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      repeated->push_back({m, f, -1});
      const int n = r->FieldSize(*m, f);
      for (int j = 0; j < n; ++j) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          if (depth < 5) CollectSlots(r->MutableRepeatedMessage(m, f, j), scalars, repeated, depth + 1);
        } else {
          scalars->push_back({m, f, j});
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth < 5) CollectSlots(r->MutableMessage(m, f), scalars, repeated, depth + 1);
    } else {
      scalars->push_back({m, f, -1});
    }
  }
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  template <typename T>
  const T& Pick(const std::vector<T>& v) { return v[rng_() % v.size()]; }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  std::mt19937_64& rng() { return rng_; }

  // 1-3 mutations, or none one time in five (valid requests keep the server busy too).
  void Mutate(Message* m) {
    if (Chance(0.2)) return;
    const int n = 1 + static_cast<int>(rng_() % 3);
    for (int k = 0; k < n; ++k) {
      std::vector<Slot> scalars, repeated;
      CollectSlots(m, &scalars, &repeated, 0);
      if (!repeated.empty() && Chance(0.25)) {
        MutateRepeated(Pick(repeated));
      } else if (!scalars.empty()) {
        MutateScalar(Pick(scalars));
      }
    }
  }

 private:
  void MutateRepeated(const Slot& s) {
    const Reflection* r = s.message->GetReflection();
    const int n = r->FieldSize(*s.message, s.field);
    if (n > 0 && Chance(0.5)) {
      r->RemoveLast(s.message, s.field);
    } else if (n > 0 && s.field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      // Duplicates (duplicate names, extra layers/nodes), a few at a time.
      const int copies = 1 + static_cast<int>(rng_() % 3);
      for (int c = 0; c < copies; ++c) {
        r->AddMessage(s.message, s.field)
            ->CopyFrom(r->GetRepeatedMessage(*s.message, s.field, rng_() % n));
      }
    } else if (s.field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      r->AddString(s.message, s.field, RandomString());
    }
  }

  std::string RandomString() {
    switch (rng_() % 4) {
      case 0: return "";
      case 1: return std::string(300, 'n');
      case 2: return "node0";
      default: {
        std::string s(rng_() % 12, ' ');
        for (char& c : s) c = static_cast<char>('a' + rng_() % 26);
        return s;
      }
    }
  }

  int64_t RandomInt() {
    static const std::vector<int64_t> v = {0, 1, -1, 2, 7, std::numeric_limits<int32_t>::max(),
                                           std::numeric_limits<int32_t>::min(),
                                           (int64_t{1} << 32) + 8,
                                           std::numeric_limits<int64_t>::max(), 100000, 4097};
    return Pick(v);
  }

  double RandomDouble() {
    static const std::vector<double> v = {0.0, -0.0, 1e-300, 1e308, -1.0, 1e12, 0.5,
                                          std::numeric_limits<double>::infinity(),
                                          -std::numeric_limits<double>::infinity(),
                                          std::numeric_limits<double>::quiet_NaN(),
                                          std::numeric_limits<double>::denorm_min()};
    return Pick(v);
  }

  void MutateScalar(const Slot& s) {
    const Reflection* r = s.message->GetReflection();
    Message* m = s.message;
    const FieldDescriptor* f = s.field;
    const bool rep = s.index >= 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        const auto v = static_cast<int32_t>(RandomInt());
        rep ? r->SetRepeatedInt32(m, f, s.index, v) : r->SetInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        const int64_t v = RandomInt();
        rep ? r->SetRepeatedInt64(m, f, s.index, v) : r->SetInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        const auto v = static_cast<uint32_t>(RandomInt());
        rep ? r->SetRepeatedUInt32(m, f, s.index, v) : r->SetUInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        const auto v = static_cast<uint64_t>(RandomInt());
        rep ? r->SetRepeatedUInt64(m, f, s.index, v) : r->SetUInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        const double v = RandomDouble();
        rep ? r->SetRepeatedDouble(m, f, s.index, v) : r->SetDouble(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_FLOAT: {
        const auto v = static_cast<float>(RandomDouble());
        rep ? r->SetRepeatedFloat(m, f, s.index, v) : r->SetFloat(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_BOOL:
        rep ? r->SetRepeatedBool(m, f, s.index, !r->GetRepeatedBool(*m, f, s.index))
            : r->SetBool(m, f, !r->GetBool(*m, f));
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int v = static_cast<int>(rng_() % 7) - 1;  // includes unknown numbers
        rep ? r->SetRepeatedEnumValue(m, f, s.index, v) : r->SetEnumValue(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string v = RandomString();
        rep ? r->SetRepeatedString(m, f, s.index, v) : r->SetString(m, f, v);
        break;
      }
      default:
        break;
    }
  }

  std::mt19937_64 rng_;
};

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(kDeadlineS * 1000)));
  return ctx;
}

proto::PlanRequest BasePlan() {
  TrainingOptions t;
  t.num_microbatches = 8;
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  proto::PlanRequest r;
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_num_devices(4);
  r.mutable_options()->set_time_budget_s(0.1);
  return r;
}

TEST(PlannerFuzzTest, RandomAndMutatedRequestsGetDocumentedAnswersInTime) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + std::string(std::getenv("TEST_TMPDIR")) + "/fuzz",
                             "--max_queued=8", "--heartbeat_timeout_s=2"})
                  .ok())
      << planner.log();
  auto channel = grpc::CreateChannel(planner.address(), grpc::InsecureChannelCredentials());
  auto stub = proto::Planner::NewStub(channel);
  grpc::GenericStub generic(channel);
  Mutator mut(kSeed);
  const proto::PlanRequest base = BasePlan();

  // The codes the service documents (service.h, planning.h, job_manager.h) plus what gRPC
  // itself answers: DEADLINE_EXCEEDED for our own deadline. Undecodable bytes are
  // INVALID_ARGUMENT naming the method (service.cc CheckDecoding), never gRPC's bare
  // UNIMPLEMENTED.
  const std::set<grpc::StatusCode> documented = {
      grpc::StatusCode::OK,
      grpc::StatusCode::INVALID_ARGUMENT,
      grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::ALREADY_EXISTS,
      grpc::StatusCode::FAILED_PRECONDITION,
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      grpc::StatusCode::DEADLINE_EXCEEDED,
  };
  std::map<std::string, std::map<int, int>> seen;  // method -> code -> count
  std::vector<std::string> job_ids = {"job-1", "no-such-job", ""};
  for (int i = 0; i < kCases; ++i) {
    const int kind = static_cast<int>(mut.rng()() % 9);
    grpc::Status s;
    std::string method;
    const auto start = std::chrono::steady_clock::now();
    auto ctx = Ctx();
    if (kind == 0) {
      proto::PlanRequest r = base;
      mut.Mutate(&r);
      proto::PlanResponse resp;
      method = "Plan";
      s = stub->Plan(ctx.get(), r, &resp);
    } else if (kind == 1) {
      proto::CreateJobRequest r;
      *r.mutable_model() = base.model();
      *r.mutable_cluster() = base.cluster();
      *r.mutable_options() = base.options();
      mut.Mutate(&r);
      proto::Job job;
      method = "CreateJob";
      s = stub->CreateJob(ctx.get(), r, &job);
      if (s.ok()) job_ids.push_back(job.id());
    } else if (kind == 2) {
      proto::GetJobRequest r;
      r.set_job_id(mut.Pick(job_ids));
      mut.Mutate(&r);
      proto::GetJobResponse resp;
      method = "GetJob";
      s = stub->GetJob(ctx.get(), r, &resp);
    } else if (kind == 3) {
      proto::ListJobsRequest r;
      mut.Mutate(&r);
      proto::ListJobsResponse resp;
      method = "ListJobs";
      s = stub->ListJobs(ctx.get(), r, &resp);
    } else if (kind == 4) {
      proto::RegisterAgentRequest r;
      r.set_node_id(mut.Chance(0.5) ? "node0" : "node1");
      r.set_num_devices(2);
      r.set_address("127.0.0.1:1");
      mut.Mutate(&r);
      proto::RegisterAgentResponse resp;
      method = "RegisterAgent";
      s = stub->RegisterAgent(ctx.get(), r, &resp);
    } else if (kind == 5) {
      proto::NodeRequest r;
      r.set_node_id(mut.Chance(0.5) ? "node1" : "node0");
      mut.Mutate(&r);
      proto::NodeResponse resp;
      method = mut.Chance(0.5) ? "DrainNode" : "ReportNodeFailure";
      s = method == "DrainNode" ? stub->DrainNode(ctx.get(), r, &resp)
                                : stub->ReportNodeFailure(ctx.get(), r, &resp);
    } else if (kind == 6) {
      proto::ReportStageTimesRequest r;
      r.set_job_id(mut.Pick(job_ids));
      r.set_plan_version(1);
      r.set_node_id("node0");
      for (int st = 0; st < 4; ++st) {
        proto::StageTime* t = r.add_times();
        t->set_stage(st);
        t->set_kind(proto::OP_KIND_F);
        t->set_seconds(0.01);
        t->set_samples(3);
      }
      mut.Mutate(&r);
      proto::ReportStageTimesResponse resp;
      method = "ReportStageTimes";
      s = stub->ReportStageTimes(ctx.get(), r, &resp);
    } else if (kind == 7) {
      proto::DeleteJobRequest r;
      r.set_job_id(mut.Pick(job_ids));
      mut.Mutate(&r);
      proto::DeleteJobResponse resp;
      method = "DeleteJob";
      s = stub->DeleteJob(ctx.get(), r, &resp);
    } else {
      // Undecodable protobuf: random bytes to a random method.
      static const char* kMethods[] = {"Plan", "CreateJob", "GetJob", "RegisterAgent",
                                       "ReportStageTimes"};
      method = absl::StrCat("raw:", kMethods[mut.rng()() % 5]);
      std::string bytes(1 + mut.rng()() % 64, '\0');
      for (char& c : bytes) c = static_cast<char>(mut.rng()());
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1), response;
      grpc::CompletionQueue cq;
      auto call = generic.PrepareUnaryCall(
          ctx.get(), absl::StrCat("/octopipe.proto.Planner/", method.substr(4)), request, &cq);
      call->StartCall();
      call->Finish(&response, &s, reinterpret_cast<void*>(1));
      void* tag = nullptr;
      bool ok = false;
      ASSERT_TRUE(cq.Next(&tag, &ok));
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seen[method][s.error_code()]++;
    EXPECT_LE(took, kDeadlineS + 1) << "case " << i << " " << method;
    const bool raw = method.rfind("raw:", 0) == 0;
    // Random bytes can happen to decode as a valid message; then any documented code.
    EXPECT_TRUE(documented.count(s.error_code()))
        << "case " << i << " " << method << ": " << s.error_code() << " " << s.error_message();
    if (raw && s.error_message().find("not a valid") != std::string::npos) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_NE(s.error_message().find(method.substr(4)), std::string::npos) << s.error_message();
    }
    ASSERT_NE(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "the planner stopped answering at case " << i << " (" << method << "):\n"
        << planner.log();
  }
  for (const auto& [method, codes] : seen) {
    std::string line = method + ":";
    for (const auto& [code, n] : codes) absl::StrAppend(&line, " ", code, "x", n);
    std::cout << line << "\n";
  }
  // Still serving, then a clean exit (a crash would be a signal status).
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest hreq;
  grpc::health::v1::HealthCheckResponse hresp;
  auto hctx = Ctx();
  EXPECT_TRUE(health->Check(hctx.get(), hreq, &hresp).ok());
  const int status = planner.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << planner.log();
}

}  // namespace
}  // namespace octopipe

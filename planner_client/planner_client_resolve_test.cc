// Re-resolution of dns:/// names: a replica set whose addresses changed (pods rescheduled
// behind a headless service) is found again without restarting the client, against real gRPC
// servers on loopback; the resolver is injected (no real DNS) and asked at most once per
// interval.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "core/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner_client/planner_client.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

// A planner that answers ListJobs with one job named after itself.
class NamedPlanner final : public proto::Planner::Service {
 public:
  explicit NamedPlanner(std::string name) : name_(std::move(name)) {}
  grpc::Status ListJobs(grpc::ServerContext*, const proto::ListJobsRequest*,
                        proto::ListJobsResponse* out) override {
    out->add_jobs()->set_id(name_);
    return grpc::Status::OK;
  }

 private:
  const std::string name_;
};

// A real gRPC server on 127.0.0.1 (a port of its own).
class Server {
 public:
  explicit Server(const std::string& name) : service_(name) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~Server() { Stop(); }
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }
  const std::string& address() const { return address_; }

 private:
  NamedPlanner service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// What the fake DNS answers, and how often it was asked.
class FakeDns {
 public:
  explicit FakeDns(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}
  void Set(std::vector<std::string> addresses) {
    std::lock_guard<std::mutex> lock(mu_);
    addresses_ = std::move(addresses);
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = true;
  }
  int calls() const { return calls_.load(); }
  PlannerResolver Resolver() {
    return [this]() -> absl::StatusOr<std::vector<std::string>> {
      ++calls_;
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_) return absl::UnavailableError("no such host");
      return addresses_;
    };
  }

 private:
  std::mutex mu_;
  std::vector<std::string> addresses_;
  bool fail_ = false;
  std::atomic<int> calls_{0};
};

// The job ListJobs names (the server that answered), or the error.
std::string Ask(PlannerClient& c, PlannerClient::Route route = PlannerClient::Route::kAny) {
  proto::ListJobsResponse out;
  const grpc::Status s =
      c.Call(route, &proto::Planner::Stub::ListJobs, proto::ListJobsRequest(), &out);
  if (!s.ok()) return "error " + std::to_string(s.error_code()) + ": " + s.error_message();
  return out.jobs_size() == 1 ? out.jobs(0).id() : "no job";
}

// `clock` (null: the real one) measures the re-resolution interval.
std::unique_ptr<PlannerClient> Client(std::vector<std::string> addresses, FakeDns& dns,
                                      std::ostream* log, double failover_window_s,
                                      double reresolve_interval_s,
                                      std::shared_ptr<const octopipe::Clock> clock = nullptr) {
  return std::make_unique<PlannerClient>(std::move(addresses), grpc::InsecureChannelCredentials(),
                                         "", /*timeout_s=*/30, log, failover_window_s,
                                         dns.Resolver(), reresolve_interval_s,
                                         /*keepalive_s=*/10, std::move(clock));
}

// Addresses nothing listens on (connecting fails at once).
std::string Nowhere(const std::string& name) {
  // Short (a unix socket's path is at most 107 characters), and the test's own.
  return "unix:/tmp/octopipe-nothing-" + std::to_string(getpid()) + "-" + name + ".sock";
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(PlannerClientResolveTest, ALoneReplicaThatMovedIsFoundAgain) {
  auto a = std::make_unique<Server>("A");
  FakeDns dns({a->address()});
  std::ostringstream log;
  PlannerClientOptions o;
  o.address = a->address();
  o.log = &log;
  o.resolve = dns.Resolver();
  absl::StatusOr<std::unique_ptr<PlannerClient>> c = ConnectPlannerClient(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Ask(**c), "A");
  EXPECT_EQ(dns.calls(), 0) << "resolved again only when a round fails";

  // The pod is rescheduled: a new address, the old one gone from DNS.
  Server b("B");
  dns.Set({b.address()});
  a->Stop();
  const auto start = Clock::now();
  EXPECT_EQ(Ask(**c), "B");
  EXPECT_LT(SecondsSince(start), o.failover_window_s);
  EXPECT_EQ(dns.calls(), 1);
  EXPECT_THAT(log.str(), HasSubstr("planner replicas resolved again: new " + b.address() +
                                   "; gone " + a->address() + " (now " + b.address() + ")"));
  // The old address is not tried again (trying it would log that it cannot be reached).
  const size_t logged = log.str().size();
  EXPECT_EQ(Ask(**c, PlannerClient::Route::kLeader), "B");
  EXPECT_EQ(Ask(**c, PlannerClient::Route::kSpread), "B");
  EXPECT_THAT(log.str().substr(logged), Not(HasSubstr("cannot be reached")));
}

TEST(PlannerClientResolveTest, AReplicaSetThatMovedIsFoundAgain) {
  auto a1 = std::make_unique<Server>("A1");
  auto a2 = std::make_unique<Server>("A2");
  const std::string a1_address = a1->address(), a2_address = a2->address();
  FakeDns dns({a1_address, a2_address});
  std::ostringstream log;
  auto interval_clock = std::make_shared<FakeClock>();
  auto c = Client({a1_address, a2_address}, dns, &log, /*failover_window_s=*/10,
                  /*reresolve_interval_s=*/1, interval_clock);
  EXPECT_EQ(Ask(*c, PlannerClient::Route::kLeader), "A1");

  Server b("B");
  dns.Set({b.address()});
  a1->Stop();
  a2->Stop();
  const auto start = Clock::now();
  EXPECT_EQ(Ask(*c, PlannerClient::Route::kLeader), "B");
  EXPECT_LT(SecondsSince(start), 10);
  EXPECT_EQ(dns.calls(), 1);
  EXPECT_THAT(log.str(), HasSubstr("planner replicas resolved again: new " + b.address() +
                                   "; gone " + a1_address + ", " + a2_address + " (now " +
                                   b.address() + ")"));
  EXPECT_EQ(c->size(), 3u) << "indices stay valid";
  EXPECT_EQ(c->address(0), a1_address);

  // The gone replicas are skipped (trying one would log that it cannot be reached).
  const size_t logged = log.str().size();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Ask(*c, PlannerClient::Route::kSpread), "B");
  EXPECT_EQ(Ask(*c, PlannerClient::Route::kAny), "B");
  EXPECT_THAT(log.str().substr(logged), Not(HasSubstr("cannot be reached")))
      << "a gone replica was tried";

  // One comes back in DNS (and up): it is used again.
  Server a1_back("A1 again");
  dns.Set({b.address(), a1_back.address()});
  b.Stop();
  interval_clock->Advance(1.1);  // past the rate limit
  EXPECT_EQ(Ask(*c, PlannerClient::Route::kLeader), "A1 again");
  EXPECT_THAT(log.str(), HasSubstr("new " + a1_back.address()));
}

TEST(PlannerClientResolveTest, AStreamFailsOverToAMovedReplica) {
  auto a = std::make_unique<Server>("A");
  FakeDns dns({a->address()});
  std::ostringstream log;
  auto c = Client({a->address()}, dns, &log, /*failover_window_s=*/10,
                  /*reresolve_interval_s=*/1);
  EXPECT_EQ(Ask(*c), "A");
  Server b("B");
  dns.Set({b.address()});
  a->Stop();
  const auto start = Clock::now();
  const std::optional<size_t> next =
      c->FailOver(0, grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(c->address(*next), b.address());
  EXPECT_EQ(c->current(), *next);
  EXPECT_LT(SecondsSince(start), 10);
  EXPECT_THAT(log.str(), HasSubstr("new " + b.address()));
}

TEST(PlannerClientResolveTest, TheResolverIsAskedAtMostOncePerInterval) {
  // A lone replica: calls from several threads, then more, within the interval.
  {
    FakeDns dns({Nowhere("lone")});
    auto c = Client({Nowhere("lone")}, dns, nullptr, /*failover_window_s=*/10,
                    /*reresolve_interval_s=*/60);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] { EXPECT_THAT(Ask(*c), HasSubstr("error 14")); });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_THAT(Ask(*c), HasSubstr("error 14"));
    EXPECT_EQ(dns.calls(), 1);
  }
  // Several replicas: one call whose rounds fail for longer than a round takes.
  {
    FakeDns dns({Nowhere("a"), Nowhere("b")});
    auto c = Client({Nowhere("a"), Nowhere("b")}, dns, nullptr, /*failover_window_s=*/3,
                    /*reresolve_interval_s=*/60);
    const auto start = Clock::now();
    EXPECT_THAT(Ask(*c, PlannerClient::Route::kLeader), HasSubstr("error 14"));
    EXPECT_GE(SecondsSince(start), 3) << "the fail-over window was waited for";
    EXPECT_EQ(dns.calls(), 1);
  }
  // Past the interval it is asked again.
  {
    FakeDns dns({Nowhere("lone")});
    auto interval_clock = std::make_shared<FakeClock>();
    auto c = Client({Nowhere("lone")}, dns, nullptr, /*failover_window_s=*/10,
                    /*reresolve_interval_s=*/0.3, interval_clock);
    EXPECT_THAT(Ask(*c), HasSubstr("error 14"));
    EXPECT_EQ(dns.calls(), 1);
    interval_clock->Advance(0.4);
    EXPECT_THAT(Ask(*c), HasSubstr("error 14"));
    EXPECT_EQ(dns.calls(), 2);
  }
}

TEST(PlannerClientResolveTest, AFailedResolutionKeepsTheReplicasAndSaysSo) {
  FakeDns dns({Nowhere("x")});
  dns.Fail();
  std::ostringstream log;
  auto c = Client({Nowhere("x")}, dns, &log, /*failover_window_s=*/10,
                  /*reresolve_interval_s=*/1);
  EXPECT_THAT(Ask(*c), HasSubstr("error 14"));
  EXPECT_EQ(dns.calls(), 1);
  EXPECT_EQ(c->size(), 1u);
  EXPECT_THAT(log.str(), HasSubstr("cannot resolve the planner replicas again (no such host); "
                                   "keeping the ones known"));
}

TEST(PlannerClientResolveTest, AListWithoutDnsNamesIsNotResolvedAgain) {
  // No resolver: the lone planner is asked once, as before.
  PlannerClientOptions o;
  o.address = Nowhere("static");
  absl::StatusOr<std::unique_ptr<PlannerClient>> c = ConnectPlannerClient(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto start = Clock::now();
  EXPECT_THAT(Ask(**c), HasSubstr("error 14"));
  EXPECT_LT(SecondsSince(start), 1);
}

}  // namespace
}  // namespace octopipe::client

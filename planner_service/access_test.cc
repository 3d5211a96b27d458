// AccessControl (planner_service/access.h): the three configurations, the role table, agents
// bound to their node, identities files (every error naming the field), reload keeping the old
// principals on a bad file; and AuditLog's lines.
#include "planner_service/access.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner_service/audit_log.h"

namespace octopipe::planner {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/access-" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kIdentities[] = R"({"principals": [
  {"name": "sched", "role": "scheduler", "token": "s-token"},
  {"name": "node-a", "role": "agent", "node": "node-a", "token": "a-token"},
  {"name": "node-b", "role": "agent", "node": "node-b", "certificate": "node-b.cluster"},
  {"name": "grafana", "role": "viewer", "token": "v-token"},
  {"name": "ops", "role": "admin", "certificate": "ops"}]})";

TEST(AccessTest, OpenAndSharedToken) {
  auto open = AccessControl::Open();
  absl::StatusOr<Principal> anyone = open->Identify("", {});
  ASSERT_TRUE(anyone.ok());
  EXPECT_EQ(anyone->role, AccessRole::kAdmin);
  EXPECT_EQ(open->Describe(), "none");

  auto shared = AccessControl::SharedToken("s3cret");
  EXPECT_TRUE(absl::IsUnauthenticated(shared->Identify("", {}).status()));  // reads too
  EXPECT_TRUE(absl::IsUnauthenticated(shared->Identify("Bearer guess", {}).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(shared->Identify("s3cret", {}).status()));  // not "Bearer "
  absl::StatusOr<Principal> holder = shared->Identify("Bearer s3cret", {});
  ASSERT_TRUE(holder.ok());
  EXPECT_EQ(holder->role, AccessRole::kAdmin);
  // A certificate alone is not the token.
  EXPECT_TRUE(absl::IsUnauthenticated(shared->Identify("", {"agent"}).status()));
}

TEST(AccessTest, RolesAndNodes) {
  absl::StatusOr<std::unique_ptr<AccessControl>> access =
      AccessControl::FromFile(Write("roles.json", kIdentities));
  ASSERT_TRUE(access.ok()) << access.status();
  auto who = [&](const std::string& auth, std::vector<std::string> certs = {}) {
    absl::StatusOr<Principal> p = (*access)->Identify(auth, certs);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : Principal{};
  };
  const Principal sched = who("Bearer s-token");
  const Principal a = who("Bearer a-token");
  const Principal b = who("", {"CN-unknown", "node-b.cluster"});  // a SAN matches
  const Principal viewer = who("Bearer v-token");
  const Principal ops = who("", {"ops"});
  EXPECT_EQ(sched.name, "sched");
  EXPECT_EQ(b.name, "node-b");
  EXPECT_EQ(b.node, "node-b");
  // A token decides over a certificate.
  EXPECT_EQ(who("Bearer v-token", {"ops"}).name, "grafana");

  for (const Principal& p : {sched, a, b, viewer, ops}) {
    EXPECT_TRUE(AccessControl::Permit(p, "GetJob", Need::kRead).ok()) << p.name;
  }
  EXPECT_TRUE(AccessControl::Permit(sched, "CreateJob", Need::kSchedule).ok());
  EXPECT_TRUE(AccessControl::Permit(ops, "DrainNode", Need::kSchedule).ok());
  absl::Status s = AccessControl::Permit(viewer, "CreateJob", Need::kSchedule);
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_EQ(s.message(),
            "identity 'grafana' (viewer) may not call CreateJob: it needs the scheduler or "
            "admin role");
  EXPECT_TRUE(absl::IsPermissionDenied(AccessControl::Permit(a, "DeleteJob", Need::kSchedule)));

  EXPECT_TRUE(AccessControl::Permit(a, "Heartbeat", Need::kNode, "node-a").ok());
  EXPECT_TRUE(AccessControl::Permit(ops, "Heartbeat", Need::kNode, "node-a").ok());
  s = AccessControl::Permit(a, "Heartbeat", Need::kNode, "node-b");
  EXPECT_TRUE(absl::IsPermissionDenied(s));
  EXPECT_EQ(s.message(),
            "identity 'node-a' (agent) may not call Heartbeat: it acts for node 'node-a' only, "
            "not for node 'node-b'");
  EXPECT_TRUE(absl::IsPermissionDenied(
      AccessControl::Permit(sched, "RegisterAgent", Need::kNode, "node-a")));

  // Unknown credentials.
  EXPECT_TRUE(absl::IsUnauthenticated((*access)->Identify("Bearer nope", {}).status()));
  absl::Status cert = (*access)->Identify("", {"stranger"}).status();
  EXPECT_TRUE(absl::IsUnauthenticated(cert));
  EXPECT_NE(cert.message().find("'stranger'"), std::string::npos) << cert;
  EXPECT_TRUE(absl::IsUnauthenticated((*access)->Identify("", {}).status()));
  EXPECT_NE((*access)->Describe().find("(5 principals)"), std::string::npos);
}

TEST(AccessTest, IdentitiesFileErrorsNameTheField) {
  const std::string token_file = Write("tok", "  t-file \r\n");
  struct Case {
    std::string text, want;
  } cases[] = {
      {"{", "not valid JSON"},
      {R"({"principals": 3})", "principals: must be an array"},
      {R"({"principals": [], "x": 1})", "unknown field 'x'"},
      {R"({"principals": []})", "principals: none"},
      {R"({"principals": [{"name": "a", "role": "root", "token": "t"}]})",
       "principals[0].role: unknown role 'root' (viewer, scheduler, agent, admin)"},
      {R"({"principals": [{"name": "a", "role": "agent", "token": "t"}]})",
       "principals[0].node: an agent names its node"},
      {R"({"principals": [{"name": "a", "role": "viewer", "node": "n", "token": "t"}]})",
       "principals[0].node: only an agent acts for a node"},
      {R"({"principals": [{"name": "a", "role": "viewer"}]})",
       "principals[0]: no credential"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token": "t t"}]})",
       "principals[0].token: contains whitespace"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token": ""}]})",
       "principals[0].token: is empty"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token": "t"},
                          {"name": "a", "role": "viewer", "token": "u"}]})",
       "principals[1].name: 'a' names another principal too"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token": "t"},
                          {"name": "b", "role": "viewer", "token": "t"}]})",
       "principals[1]: its token is another principal's too"},
      {R"({"principals": [{"name": "a", "role": "viewer", "certificate": "c"},
                          {"name": "b", "role": "viewer", "certificate": "c"}]})",
       "principals[1].certificate: 'c' is another principal's too"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token": 5}]})",
       "principals[0].token: must be a string"},
      {R"({"principals": [{"name": "a", "role": "viewer", "tokn": "t"}]})",
       "principals[0]: unknown field 'tokn'"},
      {R"({"principals": [{"name": "a", "role": "viewer", "token_file": "/no/such"}]})",
       "principals[0].token_file: cannot read '/no/such'"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string path = Write("bad-" + std::to_string(i), cases[i].text);
    absl::StatusOr<std::unique_ptr<AccessControl>> a = AccessControl::FromFile(path);
    ASSERT_FALSE(a.ok()) << cases[i].text;
    EXPECT_TRUE(absl::IsInvalidArgument(a.status()));
    EXPECT_NE(a.status().message().find(cases[i].want), std::string::npos)
        << "case " << i << ": " << a.status();
    EXPECT_NE(a.status().message().find("identities '" + path + "'"), std::string::npos);
  }
  EXPECT_FALSE(AccessControl::FromFile("/no/such/identities.json").ok());
  // A token file's surrounding whitespace is trimmed.
  absl::StatusOr<std::unique_ptr<AccessControl>> good = AccessControl::FromFile(Write(
      "file.json", R"({"principals": [{"name": "f", "role": "viewer", "token_file": ")" +
                       token_file + "\"}]}"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Identify("Bearer t-file", {}).ok());
}

TEST(AccessTest, ReloadSwapsPrincipalsAndKeepsThemOnABadFile) {
  const std::string path = Write("reload.json", kIdentities);
  absl::StatusOr<std::unique_ptr<AccessControl>> access = AccessControl::FromFile(path);
  ASSERT_TRUE(access.ok()) << access.status();
  EXPECT_TRUE((*access)->Identify("Bearer a-token", {}).ok());
  std::ofstream(path) << R"({"principals": [{"name": "new", "role": "viewer", "token": "n"}]})";
  ASSERT_TRUE((*access)->Reload().ok());
  EXPECT_TRUE(absl::IsUnauthenticated((*access)->Identify("Bearer a-token", {}).status()));
  EXPECT_EQ((*access)->Identify("Bearer n", {})->name, "new");
  std::ofstream(path) << "{ broken";
  EXPECT_FALSE((*access)->Reload().ok());
  EXPECT_EQ((*access)->Identify("Bearer n", {})->name, "new");  // kept
}

TEST(AuditLogTest, OneJsonLinePerCallAppended) {
  const std::string path = ::testing::TempDir() + "/audit.jsonl";
  std::filesystem::remove(path);
  {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    const Principal a{"node-a", AccessRole::kAgent, "node-a"};
    (*log)->Record(&a, "Heartbeat", "node-a", absl::OkStatus());
    (*log)->Record(nullptr, "CreateJob", std::string(100, 'x'),
                   absl::UnauthenticatedError("authorization: bearer token not accepted"));
  }
  {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path);  // appends
    ASSERT_TRUE(log.ok());
    (*log)->Record(nullptr, "DeleteJob", "job-\xff", absl::NotFoundError("no job"));
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["identity"], "node-a");
  EXPECT_EQ(lines[0]["role"], "agent");
  EXPECT_EQ(lines[0]["method"], "Heartbeat");
  EXPECT_EQ(lines[0]["code"], "OK");
  EXPECT_FALSE(lines[0].contains("message"));
  EXPECT_GT(lines[0]["unix_ms"].get<int64_t>(), 0);
  EXPECT_EQ(lines[1]["identity"], "unidentified");
  EXPECT_EQ(lines[1]["target"].get<std::string>().size(), 64u);
  EXPECT_EQ(lines[1]["code"], "UNAUTHENTICATED");
  EXPECT_EQ(lines[1]["message"], "authorization: bearer token not accepted");
  EXPECT_EQ(lines[2]["code"], "NOT_FOUND");
  EXPECT_FALSE(AuditLog::Open("/no/such/dir/audit.jsonl").ok());
}

}  // namespace
}  // namespace octopipe::planner

#include "planner_service/access.h"

#include <openssl/sha.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace octopipe::planner {
namespace {

constexpr char kBearer[] = "Bearer ";

absl::StatusOr<AccessRole> ParseRole(const std::string& text) {
  if (text == "viewer") return AccessRole::kViewer;
  if (text == "scheduler") return AccessRole::kScheduler;
  if (text == "agent") return AccessRole::kAgent;
  if (text == "admin") return AccessRole::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", text.substr(0, 64), "' (viewer, scheduler, agent, admin)"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A bearer token: no whitespace, not empty.
absl::Status CheckToken(const std::string& token) {
  if (token.empty()) return absl::InvalidArgumentError("is empty");
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("contains whitespace (a bearer token is one word)");
  }
  return absl::OkStatus();
}

// One entry of "principals"; `where` is "principals[i]".
absl::Status AddPrincipal(const nlohmann::json& p, const std::string& where,
                          std::set<std::string>* names, std::map<std::string, Principal>* by_token,
                          std::map<std::string, Principal>* by_certificate) {
  auto field = [&](const char* key) -> absl::StatusOr<std::string> {
    if (!p.contains(key)) return std::string();
    if (!p[key].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": must be a string"));
    }
    return p[key].get<std::string>();
  };
  if (!p.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be an object"));
  for (const auto& [key, value] : p.items()) {
    static const std::set<std::string> kKnown = {"name", "role", "node", "token", "token_file",
                                                 "certificate"};
    if (!kKnown.count(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": unknown field '", key.substr(0, 64),
          "' (name, role, node, token, token_file, certificate)"));
    }
  }
  Principal out;
  auto name = field("name");
  auto role = field("role");
  auto node = field("node");
  auto token = field("token");
  auto token_file = field("token_file");
  auto certificate = field("certificate");
  for (const auto* s : {&name, &role, &node, &token, &token_file, &certificate}) {
    if (!s->ok()) return s->status();
  }
  out.name = *name;
  if (out.name.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ".name: is empty"));
  if (!names->insert(out.name).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".name: '", out.name, "' names another principal too"));
  }
  absl::StatusOr<AccessRole> r = ParseRole(*role);
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ".role: ", r.status().message()));
  out.role = *r;
  out.node = *node;
  if (out.role == AccessRole::kAgent && out.node.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".node: an agent names its node"));
  }
  if (out.role != AccessRole::kAgent && !out.node.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".node: only an agent acts for a node (role ", *role, ")"));
  }
  std::string secret = *token;
  if (!token_file->empty()) {
    if (!secret.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": token and token_file are mutually exclusive"));
    }
    absl::StatusOr<std::string> read = ReadFile(*token_file);
    if (!read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".token_file: ", read.status().message()));
    }
    secret = std::string(absl::StripAsciiWhitespace(*read));
  }
  const bool has_token = p.contains("token") || !token_file->empty();
  if (!has_token && certificate->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": no credential (token, token_file or certificate)"));
  }
  if (has_token) {
    if (absl::Status s = CheckToken(secret); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, token_file->empty() ? ".token: " : ".token_file: the token ",
                       s.message()));
    }
    if (!by_token->emplace(Sha256Hex(secret), out).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": its token is another principal's too"));
    }
  }
  if (!certificate->empty() && !by_certificate->emplace(*certificate, out).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".certificate: '", *certificate, "' is another principal's too"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* AccessRoleName(AccessRole role) {
  switch (role) {
    case AccessRole::kViewer: return "viewer";
    case AccessRole::kScheduler: return "scheduler";
    case AccessRole::kAgent: return "agent";
    case AccessRole::kAdmin: return "admin";
  }
  return "?";
}

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  std::string out;
  char hex[3];
  for (unsigned char c : digest) {
    std::snprintf(hex, sizeof(hex), "%02x", c);
    out += hex;
  }
  return out;
}

std::unique_ptr<AccessControl> AccessControl::Open() {
  auto table = std::make_shared<Table>();
  table->open = true;
  return std::unique_ptr<AccessControl>(new AccessControl("", std::move(table)));
}

std::unique_ptr<AccessControl> AccessControl::SharedToken(const std::string& token) {
  auto table = std::make_shared<Table>();
  table->by_token_digest[Sha256Hex(token)] = Principal{"token", AccessRole::kAdmin, ""};
  table->principals = 1;
  return std::unique_ptr<AccessControl>(new AccessControl("", std::move(table)));
}

absl::StatusOr<AccessControl::Table> AccessControl::Load(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("identities '", path, "': ", why));
  };
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return fail(std::string(text.status().message()));
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail("not valid JSON");
  if (!doc.is_object() || !doc.contains("principals") || !doc["principals"].is_array()) {
    return fail("principals: must be an array of principals");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "principals") return fail(absl::StrCat("unknown field '", key.substr(0, 64), "'"));
  }
  Table table;
  std::set<std::string> names;
  const nlohmann::json& list = doc["principals"];
  for (size_t i = 0; i < list.size(); ++i) {
    absl::Status s = AddPrincipal(list[i], absl::StrCat("principals[", i, "]"), &names,
                                  &table.by_token_digest, &table.by_certificate);
    if (!s.ok()) return fail(std::string(s.message()));
  }
  if (names.empty()) return fail("principals: none (nobody could call the planner)");
  table.principals = names.size();
  return table;
}

absl::StatusOr<std::unique_ptr<AccessControl>> AccessControl::FromFile(const std::string& path) {
  absl::StatusOr<Table> table = Load(path);
  if (!table.ok()) return table.status();
  return std::unique_ptr<AccessControl>(
      new AccessControl(path, std::make_shared<const Table>(std::move(*table))));
}

absl::Status AccessControl::Reload() {
  if (path_.empty()) return absl::OkStatus();
  absl::StatusOr<Table> table = Load(path_);
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&mu_);
  table_ = std::make_shared<const Table>(std::move(*table));
  return absl::OkStatus();
}

std::shared_ptr<const AccessControl::Table> AccessControl::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

std::string AccessControl::Describe() const {
  std::shared_ptr<const Table> t = table();
  if (t->open) return "none";
  if (path_.empty()) return "shared token";
  return absl::StrCat("identities file ", path_, " (", t->principals, " principals)");
}

absl::StatusOr<Principal> AccessControl::Identify(
    const std::string& authorization, const std::vector<std::string>& certificate_names) const {
  std::shared_ptr<const Table> t = table();
  if (t->open) return Principal{"anonymous", AccessRole::kAdmin, ""};
  if (!authorization.empty()) {
    if (!absl::StartsWith(authorization, kBearer)) {
      return absl::UnauthenticatedError(
          "authorization: not a bearer token (metadata 'authorization: Bearer <token>')");
    }
    auto it = t->by_token_digest.find(Sha256Hex(authorization.substr(sizeof(kBearer) - 1)));
    if (it == t->by_token_digest.end()) {
      return absl::UnauthenticatedError("authorization: bearer token not accepted");
    }
    return it->second;
  }
  for (const std::string& name : certificate_names) {
    auto it = t->by_certificate.find(name);
    if (it != t->by_certificate.end()) return it->second;
  }
  if (!certificate_names.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the client certificate ('", certificate_names.front().substr(0, 128),
        "') names no principal of the planner's identities, and no bearer token was sent"));
  }
  return absl::UnauthenticatedError(
      t->by_certificate.empty()
          ? "authorization: missing bearer token (metadata 'authorization: Bearer <token>')"
          : "authorization: missing credential: a bearer token (metadata 'authorization: "
            "Bearer <token>') or a client certificate naming a principal");
}

absl::Status AccessControl::Permit(const Principal& who, const char* method, Need need,
                                   const std::string& node) {
  const AccessRole role = who.role;
  if (role == AccessRole::kAdmin || need == Need::kRead) return absl::OkStatus();
  auto denied = [&](const std::string& why) {
    return absl::PermissionDeniedError(absl::StrCat("identity '", who.name, "' (",
                                                    AccessRoleName(role), ") may not call ",
                                                    method, ": ", why));
  };
  if (need == Need::kSchedule) {
    if (role == AccessRole::kScheduler) return absl::OkStatus();
    return denied("it needs the scheduler or admin role");
  }
  if (role != AccessRole::kAgent) return denied("it is for a node's agent (or an admin)");
  if (node != who.node) {
    return denied(absl::StrCat("it acts for node '", who.node, "' only, not for node '",
                               node.substr(0, 128), "'"));
  }
  return absl::OkStatus();
}

}  // namespace octopipe::planner

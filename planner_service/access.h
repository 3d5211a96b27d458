// AccessControl: who a caller of the planner's API is, and what it may do.
//
// A caller is identified by a bearer token (metadata "authorization: Bearer <token>") or, with
// mutual TLS, by its client certificate's names (the subject CN, then each SAN). A token, when
// sent, decides. The identity has a role:
//
//   call                                                 viewer  scheduler  agent    admin
//   GetJob ListJobs WatchPlan ListAgents                  yes     yes        yes      yes
//   Plan CreateJob DeleteJob DrainNode ReportNodeFailure  -       yes        -        yes
//   RegisterAgent Heartbeat (HeartbeatStream's messages)
//   ReportStageTimes ReportJobEvent                       -       -          own node yes
//
// An agent identity names one node and may act only for it: a call for another node is
// PERMISSION_DENIED naming both (on a HeartbeatStream, each heartbeat is authorized as a
// Heartbeat call). Health checks need no credential.
//
// Configurations (planner flags):
//   * none — every caller is an anonymous admin (a planner on a trusted network; with mutual
//     TLS the CA that signed the client certificates is the trust);
//   * --token / --token_file — one shared secret whose holder is an admin; every other caller,
//     reads included, is UNAUTHENTICATED;
//   * --identities=FILE — principals with their own credentials and roles, re-read on SIGHUP
//     (a file that does not load keeps the previous principals and is logged). The file is
//     JSON:
//       {"principals": [
//         {"name": "scheduler", "role": "scheduler", "token_file": "/etc/octopipe/sched.token"},
//         {"name": "node-a", "role": "agent", "node": "node-a", "token": "..."},
//         {"name": "node-b", "role": "agent", "node": "node-b", "certificate": "node-b"},
//         {"name": "grafana", "role": "viewer", "token": "..."}]}
//     Each principal has a unique name, a role (viewer, scheduler, agent, admin), a node when
//     (and only when) it is an agent, and at least one credential: `token` or `token_file` (a
//     bearer token without whitespace; the file's surrounding whitespace is trimmed) and/or
//     `certificate` (a CN or SAN its client certificate carries). Tokens and certificate names
//     are unique across principals. Tokens are kept as SHA-256 digests.
//
// Thread-safe: Identify and Permit may run concurrently with Reload.
#ifndef OCTOPIPE_PLANNER_SERVICE_ACCESS_H_
#define OCTOPIPE_PLANNER_SERVICE_ACCESS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

enum class AccessRole { kViewer, kScheduler, kAgent, kAdmin };

// "viewer", "scheduler", "agent", "admin".
const char* AccessRoleName(AccessRole role);

struct Principal {
  std::string name;  // "anonymous" without any configuration, "token" for the shared token
  AccessRole role = AccessRole::kAdmin;
  std::string node;  // agents: the node they act for
};

// What a call needs (see the table above).
enum class Need {
  kRead,      // GetJob, ListJobs, WatchPlan, ListAgents
  kSchedule,  // Plan, CreateJob, DeleteJob, DrainNode, ReportNodeFailure
  kNode,      // RegisterAgent, Heartbeat, ReportStageTimes, ReportJobEvent: for one node
};

class AccessControl {
 public:
  // Every caller an anonymous admin.
  static std::unique_ptr<AccessControl> Open();
  // One shared token; its holder an admin.
  static std::unique_ptr<AccessControl> SharedToken(const std::string& token);
  // The principals of an identities file (see the top comment). Errors name the file and the
  // field: "identities 'F': principals[2].role: unknown role 'root' (viewer, scheduler, agent,
  // admin)"; a file that cannot be read or parsed is kInvalidArgument too.
  static absl::StatusOr<std::unique_ptr<AccessControl>> FromFile(const std::string& path);

  // Re-reads the identities file; on error the principals stay as they were. A no-op (OK) for
  // the other configurations.
  absl::Status Reload();

  // Who calls: `authorization` is the metadata value ("" when absent), `certificate_names` the
  // verified client certificate's CN and SANs (empty without mutual TLS). kUnauthenticated
  // (naming what was missing or not accepted) when a credential is required.
  absl::StatusOr<Principal> Identify(const std::string& authorization,
                                     const std::vector<std::string>& certificate_names) const;

  // Whether `who` may make `method`, which needs `need` (for `node` with Need::kNode).
  // kPermissionDenied naming the identity, its role, the method and, for a node, both nodes.
  static absl::Status Permit(const Principal& who, const char* method, Need need,
                             const std::string& node = "");

  // "none", "shared token", "identities file F (N principals)".
  std::string Describe() const;

 private:
  struct Table {
    bool open = false;
    std::map<std::string, Principal> by_token_digest;  // SHA-256 of the token, hex
    std::map<std::string, Principal> by_certificate;
    size_t principals = 0;
  };
  static absl::StatusOr<Table> Load(const std::string& path);

  explicit AccessControl(std::string path, std::shared_ptr<const Table> table)
      : path_(std::move(path)), table_(std::move(table)) {}

  std::shared_ptr<const Table> table() const;

  const std::string path_;  // "" unless from a file
  mutable absl::Mutex mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(mu_);
};

// Hex SHA-256 of `text`.
std::string Sha256Hex(const std::string& text);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_ACCESS_H_

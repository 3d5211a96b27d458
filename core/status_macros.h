// Tiny status-propagation macros. Debian's Abseil (20220623) predates ABSL_RETURN_IF_ERROR.
#ifndef OCTOPIPE_CORE_STATUS_MACROS_H_
#define OCTOPIPE_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OCTO_CONCAT_INNER_(a, b) a##b
#define OCTO_CONCAT_(a, b) OCTO_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status octo_status_ = (expr);          \
    if (!octo_status_.ok()) return octo_status_;   \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` — binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(OCTO_CONCAT_(octo_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // OCTOPIPE_CORE_STATUS_MACROS_H_

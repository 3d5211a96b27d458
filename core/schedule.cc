#include "core/schedule.h"

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace octopipe {

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kF: return "F";
    case OpKind::kB: return "B";
    case OpKind::kW: return "W";
    case OpKind::kBW: return "BW";
    case OpKind::kR: return "R";
    case OpKind::kS: return "S";
    case OpKind::kT: return "T";
  }
  return "?";
}

std::string OpToString(const Op& op) {
  return absl::StrCat(OpKindName(op.kind), op.stage, ".", op.microbatch);
}

absl::StatusOr<OpKind> ParseOpKind(absl::string_view text) {
  for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kBW, OpKind::kR, OpKind::kS,
                   OpKind::kT}) {
    if (text == OpKindName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("op_kind must be one of F, B, W, BW, R, S, T, got '", text, "'"));
}

absl::StatusOr<Op> ParseOp(absl::string_view text) {
  const size_t kind_len = absl::StartsWith(text, "BW") ? 2 : 1;
  absl::StatusOr<OpKind> kind = ParseOpKind(text.substr(0, kind_len));
  if (!kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", text, "': expected KIND STAGE.MICROBATCH with KIND in F, B, W, BW, R, S, T"));
  }
  Op op;
  op.kind = *kind;
  absl::string_view rest = text.substr(kind_len);
  const size_t dot = rest.find('.');
  int stage = -1, mb = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &stage) ||
      !absl::SimpleAtoi(rest.substr(dot + 1), &mb) || stage < 0 || mb < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", text, "': expected KIND STAGE.MICROBATCH such as F3.7 (non-negative integers)"));
  }
  op.stage = stage;
  op.microbatch = mb;
  return op;
}

size_t Schedule::total_ops() const {
  size_t n = 0;
  for (const auto& device_ops : ops) n += device_ops.size();
  return n;
}

}  // namespace octopipe

#include "report/html_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace octopipe::report {
namespace {

struct KindStyle {
  const char* kind;
  const char* color;
  const char* name;
};

// Told apart at a glance, and none of them grey (the rows' background, the axis and the
// memory bars are greys).
constexpr KindStyle kKinds[] = {
    {"F", "#2f6fde", "forward"},          {"B", "#2ca05a", "backward (input)"},
    {"W", "#f29e2e", "weight gradient"},  {"BW", "#8e5bd0", "backward (B+W)"},
    {"R", "#d94848", "recompute"},        {"S", "#17a2b8", "vocabulary S"},
    {"T", "#a0a23a", "vocabulary T"},
};

constexpr int kSvgWidthPx = kLabelWidthPx + kPlotWidthPx + 24;
constexpr int kBarRowPx = 20;

// ---- text ----------------------------------------------------------------------------------

std::string Esc(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.2f ms", s * 1e3);
  return absl::StrFormat("%.1f us", s * 1e6);
}

std::string Percent(double ratio) { return absl::StrFormat("%.1f%%", ratio * 100); }

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrFormat("%.1f GB", bytes / 1e9);
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  return absl::StrFormat("%.0f B", bytes);
}

std::string Count(double n) {
  const std::string digits = absl::StrFormat("%.0f", n);
  std::string out;
  const size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    out += digits[i];
    const size_t left = digits.size() - 1 - i;
    if (i >= start && left > 0 && left % 3 == 0) out += ',';
  }
  return out;
}

std::string Px(double v) { return absl::StrFormat("%.2f", v); }

bool Unlimited(double capacity) { return !std::isfinite(capacity) || capacity <= 0; }

// ---- validation ----------------------------------------------------------------------------

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status CheckTime(const std::string& field, double v) {
  if (std::isfinite(v) && v >= 0) return absl::OkStatus();
  return Bad(field, absl::StrCat("must be a finite number >= 0, got ", v));
}

absl::Status ValidateOp(const TimelineOp& op, const std::string& where) {
  if (KindColor(op.kind).empty()) {
    return Bad(where + ".kind", absl::StrCat("unknown op kind '", op.kind,
                                             "' (want F, B, W, BW, R, S or T)"));
  }
  if (absl::Status s = CheckTime(where + ".start_s", op.start_s); !s.ok()) return s;
  if (absl::Status s = CheckTime(where + ".end_s", op.end_s); !s.ok()) return s;
  if (op.end_s < op.start_s) {
    return Bad(where + ".end_s", absl::StrCat(op.end_s, " is before start_s ", op.start_s));
  }
  return absl::OkStatus();
}

absl::Status ValidateTimeline(const Timeline& t, const std::string& where) {
  if (absl::Status s = CheckTime(where + ".iteration_s", t.iteration_s); !s.ok()) return s;
  if (t.devices.empty()) return Bad(where + ".devices", "no device");
  for (size_t d = 0; d < t.devices.size(); ++d) {
    for (size_t i = 0; i < t.devices[d].size(); ++i) {
      absl::Status s =
          ValidateOp(t.devices[d][i], absl::StrCat(where, ".devices[", d, "].ops[", i, "]"));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSection(const Section& sec, const std::string& where) {
  if (absl::Status s = ValidateTimeline(sec.plan, where + ".plan"); !s.ok()) return s;
  if (sec.baseline.has_value()) {
    if (absl::Status s = ValidateTimeline(*sec.baseline, where + ".baseline"); !s.ok()) return s;
  }
  for (size_t d = 0; d < sec.memory.size(); ++d) {
    const MemoryBar& m = sec.memory[d];
    if (absl::Status s = CheckTime(absl::StrCat(where, ".memory[", d, "].peak_bytes"),
                                   m.peak_bytes);
        !s.ok()) {
      return s;
    }
    if (std::isnan(m.capacity_bytes)) {
      return Bad(absl::StrCat(where, ".memory[", d, "].capacity_bytes"), "is NaN");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePage(const Page& page) {
  if (page.sections.empty()) return Bad("sections", "a page needs at least one section");
  for (const auto& [field, v] : {std::pair{"iteration_s", page.iteration_s},
                                 std::pair{"bubble_ratio", page.bubble_ratio},
                                 std::pair{"tokens_per_s", page.tokens_per_s}}) {
    if (!std::isfinite(v)) return Bad(field, absl::StrCat("must be finite, got ", v));
  }
  for (size_t i = 0; i < page.sections.size(); ++i) {
    absl::Status s = ValidateSection(page.sections[i], absl::StrCat("sections[", i, "]"));
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < page.bars.size(); ++i) {
    absl::Status s =
        CheckTime(absl::StrCat("bars[", i, "].iteration_s"), page.bars[i].iteration_s);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---- the time axis -------------------------------------------------------------------------

struct Axis {
  double max_s = 0;
  double px_per_s = 0;
  double tick_s = 0;
  double X(double s) const { return kLabelWidthPx + s * px_per_s; }
};

double TimelineEnd(const Timeline& t) {
  double end = t.iteration_s;
  for (const auto& ops : t.devices) {
    for (const TimelineOp& op : ops) end = std::max(end, op.end_s);
  }
  return end;
}

// 1, 2 or 5 times a power of ten, so that the axis has at most about ten ticks.
double NiceStep(double max_s) {
  const double raw = max_s / 10;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

Axis MakeAxis(const Page& page) {
  double end = 0;
  for (const Section& s : page.sections) {
    end = std::max(end, TimelineEnd(s.plan));
    if (s.baseline.has_value()) end = std::max(end, TimelineEnd(*s.baseline));
  }
  for (const IterationBar& b : page.bars) end = std::max(end, b.iteration_s);
  Axis a;
  a.max_s = end > 0 ? end : 1e-3;
  a.px_per_s = kPlotWidthPx / a.max_s;
  a.tick_s = NiceStep(a.max_s);
  return a;
}

std::string TickLabel(double s, double step) {
  const double ms = s * 1e3;
  const int decimals = step * 1e3 >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step * 1e3)));
  return absl::StrFormat("%.*f ms", decimals, ms);
}

// The axis line, its ticks and labels, grid lines down to `bottom`, and the title at the left.
void AppendAxis(std::string* out, const Axis& a, int bottom, absl::string_view title) {
  absl::StrAppend(out, "<text class=\"tl-title\" x=\"8\" y=\"16\">", Esc(title), "</text>");
  for (int i = 0; i * a.tick_s <= a.max_s * (1 + 1e-9); ++i) {
    const double x = a.X(i * a.tick_s);
    absl::StrAppend(out, "<line class=\"grid\" x1=\"", Px(x), "\" x2=\"", Px(x), "\" y1=\"",
                    kAxisHeightPx - 4, "\" y2=\"", bottom, "\"/>");
    absl::StrAppend(out, "<text class=\"tick\" x=\"", Px(x), "\" y=\"14\">",
                    TickLabel(i * a.tick_s, a.tick_s), "</text>");
  }
}

// ---- timelines ------------------------------------------------------------------------------

void AppendOp(std::string* out, const TimelineOp& op, size_t device, int y, const Axis& a) {
  const double x = a.X(op.start_s);
  const double w = std::max(1.0, (op.end_s - op.start_s) * a.px_per_s);
  absl::StrAppend(out, "<rect class=\"op\" data-op=\"", Esc(op.label), "\" data-kind=\"",
                  Esc(op.kind), "\" data-device=\"", device, "\" data-start-ms=\"",
                  absl::StrFormat("%.6f", op.start_s * 1e3), "\" data-end-ms=\"",
                  absl::StrFormat("%.6f", op.end_s * 1e3), "\" x=\"", Px(x), "\" y=\"", y + 2,
                  "\" width=\"", Px(w), "\" height=\"", kRowHeightPx - 4, "\" fill=\"",
                  KindColor(op.kind), "\"/>");
}

void AppendRow(std::string* out, const Timeline& t, size_t d, const Axis& a) {
  const int y = kAxisHeightPx + static_cast<int>(d) * kRowHeightPx;
  const std::string label =
      d < t.device_labels.size() ? t.device_labels[d] : absl::StrCat("device ", d);
  absl::StrAppend(out, "<g class=\"device-row\" data-device=\"", d, "\">");
  absl::StrAppend(out, "<rect class=\"row-bg\" x=\"", kLabelWidthPx, "\" y=\"", y, "\" width=\"",
                  kPlotWidthPx, "\" height=\"", kRowHeightPx, "\"/>");
  absl::StrAppend(out, "<text class=\"row-label\" x=\"8\" y=\"", y + 14, "\">", Esc(label),
                  "</text>");
  for (const TimelineOp& op : t.devices[d]) AppendOp(out, op, d, y, a);
  absl::StrAppend(out, "</g>");
}

size_t OpCount(const Timeline& t) {
  size_t n = 0;
  for (const auto& ops : t.devices) n += ops.size();
  return n;
}

std::string TimelineSvg(const Timeline& t, size_t section, absl::string_view which,
                        const Axis& a) {
  const int height = kAxisHeightPx + static_cast<int>(t.devices.size()) * kRowHeightPx + 4;
  std::string out = absl::StrCat(
      "<svg class=\"timeline\" id=\"timeline-", section, "-", which, "\" data-timeline=\"",
      which, "\" data-section=\"", section, "\" data-ops=\"", OpCount(t), "\" width=\"",
      kSvgWidthPx, "\" height=\"", height, "\" viewBox=\"0 0 ", kSvgWidthPx, " ", height,
      "\" xmlns=\"http://www.w3.org/2000/svg\">");
  AppendAxis(&out, a, height - 4, t.title);
  for (size_t d = 0; d < t.devices.size(); ++d) AppendRow(&out, t, d, a);
  const double x = a.X(t.iteration_s);
  absl::StrAppend(&out, "<line class=\"iteration-end\" x1=\"", Px(x), "\" x2=\"", Px(x),
                  "\" y1=\"", kAxisHeightPx - 4, "\" y2=\"", height - 4, "\"><title>iteration ",
                  Seconds(t.iteration_s), "</title></line></svg>\n");
  return out;
}

// ---- tables and bars -----------------------------------------------------------------------

std::string ReplicaTable(const std::vector<Replica>& replicas) {
  if (replicas.empty()) return "";
  std::string out =
      "<h3>Run by</h3><table class=\"replicas\"><tr><th>replica</th><th>ranks</th></tr>";
  for (const Replica& r : replicas) {
    absl::StrAppend(&out, "<tr class=\"replica-row\"><td>", Esc(r.name), "</td><td>",
                    Esc(r.ranks), "</td></tr>");
  }
  return out + "</table>\n";
}

std::string StageTable(const std::vector<StageRow>& stages) {
  std::string out =
      "<h3>Stages</h3><table class=\"stages\"><tr><th>stage</th><th>layers</th><th>kinds</th>"
      "<th>device</th><th>recompute</th></tr>";
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageRow& st = stages[s];
    absl::StrAppend(&out, "<tr class=\"stage-row\"><td>", s, "</td><td>", st.first_layer, "..",
                    st.last_layer, "</td><td>", Esc(st.kinds), "</td><td>", st.device,
                    "</td><td>", st.recompute ? "yes" : "no", "</td></tr>");
  }
  return out + "</table>\n";
}

std::string MemoryText(const MemoryBar& m) {
  if (Unlimited(m.capacity_bytes)) return absl::StrCat(Bytes(m.peak_bytes), " (unlimited)");
  return absl::StrCat(Bytes(m.peak_bytes), " of ", Bytes(m.capacity_bytes), " (",
                      Percent(m.peak_bytes / m.capacity_bytes),
                      m.peak_bytes > m.capacity_bytes ? ", DOES NOT FIT)" : ")");
}

std::string MemorySvg(const std::vector<MemoryBar>& memory) {
  if (memory.empty()) return "";
  double scale = 0;
  for (const MemoryBar& m : memory) {
    scale = std::max(scale, m.peak_bytes);
    if (!Unlimited(m.capacity_bytes)) scale = std::max(scale, m.capacity_bytes);
  }
  const double px = scale > 0 ? kPlotWidthPx * 0.75 / scale : 0;  // room for the text
  const int height = static_cast<int>(memory.size()) * kBarRowPx + 4;
  std::string out = absl::StrCat("<h3>Peak memory per device</h3><svg class=\"memory\" width=\"",
                                 kSvgWidthPx, "\" height=\"", height, "\">");
  for (size_t d = 0; d < memory.size(); ++d) {
    const MemoryBar& m = memory[d];
    const int y = static_cast<int>(d) * kBarRowPx;
    const bool over = !Unlimited(m.capacity_bytes) && m.peak_bytes > m.capacity_bytes;
    const double w = m.peak_bytes * px;
    absl::StrAppend(&out, "<text class=\"row-label\" x=\"8\" y=\"", y + 14, "\">", Esc(m.device),
                    "</text><rect class=\"mem-bar", over ? " over" : "", "\" data-device=\"", d,
                    "\" data-peak-bytes=\"", absl::StrFormat("%.0f", m.peak_bytes),
                    "\" data-capacity-bytes=\"",
                    Unlimited(m.capacity_bytes) ? std::string("inf")
                                                : absl::StrFormat("%.0f", m.capacity_bytes),
                    "\" x=\"", kLabelWidthPx, "\" y=\"", y + 3, "\" width=\"", Px(w),
                    "\" height=\"", kBarRowPx - 6, "\"/>");
    if (!Unlimited(m.capacity_bytes)) {
      const double cx = kLabelWidthPx + m.capacity_bytes * px;
      absl::StrAppend(&out, "<line class=\"capacity\" x1=\"", Px(cx), "\" x2=\"", Px(cx),
                      "\" y1=\"", y + 1, "\" y2=\"", y + kBarRowPx - 1, "\"/>");
    }
    absl::StrAppend(&out, "<text class=\"mem-text\" x=\"",
                    Px(kLabelWidthPx + std::max(w, Unlimited(m.capacity_bytes)
                                                       ? 0.0
                                                       : m.capacity_bytes * px) + 8),
                    "\" y=\"", y + 14, "\">", MemoryText(m), "</text>");
  }
  return out + "</svg>\n";
}

std::string BarsSvg(const Page& page, const Axis& a) {
  if (page.bars.empty()) return "";
  const int height = kAxisHeightPx + static_cast<int>(page.bars.size()) * kBarRowPx + 4;
  std::string out = absl::StrCat("<section class=\"bars\"><h2>", Esc(page.bars_title),
                                 "</h2><svg class=\"iteration-bars\" width=\"", kSvgWidthPx,
                                 "\" height=\"", height, "\">");
  AppendAxis(&out, a, height - 4, "iteration");
  for (size_t i = 0; i < page.bars.size(); ++i) {
    const IterationBar& b = page.bars[i];
    const int y = kAxisHeightPx + static_cast<int>(i) * kBarRowPx;
    const double w = b.iteration_s * a.px_per_s;
    absl::StrAppend(&out, "<text class=\"row-label\" x=\"8\" y=\"", y + 14, "\">", Esc(b.name),
                    "</text><rect class=\"iteration-bar", b.ours ? " ours" : "",
                    b.fits ? "" : " over", "\" data-name=\"", Esc(b.name), "\" x=\"",
                    kLabelWidthPx, "\" y=\"", y + 3, "\" width=\"", Px(w), "\" height=\"",
                    kBarRowPx - 6, "\"/>");
    // The figure inside a long bar (its end may be the plot's), after a short one.
    const bool inside = w > kPlotWidthPx / 4;
    absl::StrAppend(&out, "<text class=\"", inside ? "bar-text inside" : "bar-text", "\" x=\"",
                    Px(kLabelWidthPx + (inside ? w - 6 : w + 8)), "\" y=\"", y + 14, "\">",
                    Seconds(b.iteration_s), b.fits ? "" : " (does not fit)", "</text>");
  }
  return out + "</svg></section>\n";
}

// ---- the page ------------------------------------------------------------------------------

constexpr char kStyle[] = R"css(
body{margin:0;font:13px/1.4 "DejaVu Sans",Helvetica,Arial,sans-serif;color:#1d232b;
  background:#fff}
header{box-sizing:border-box;overflow:hidden;margin:0;padding:8px 16px;background:#1d232b;
  color:#fff}
header h1{margin:0;font-size:18px;line-height:26px}
header h1,header p,h2{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
header p{margin:0;line-height:20px}
.legend span{display:inline-block;margin-right:14px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
main{margin:0;padding:0}
section{margin:0;padding:0 0 12px 0}
h2{box-sizing:border-box;margin:0;padding:0 16px;font-size:15px}
h3{margin:10px 16px 4px;font-size:13px}
svg{display:block}
.op{shape-rendering:crispEdges}
.row-bg{fill:#f1f3f5;shape-rendering:crispEdges}
.grid{stroke:#d5d9de;stroke-width:1}
.tick{font-size:11px;fill:#55606e;text-anchor:middle}
.tl-title{font-weight:bold;font-size:12px}
.row-label,.mem-text,.bar-text{font-size:12px;fill:#1d232b}
.bar-text.inside{fill:#fff;text-anchor:end}
.iteration-bar.over+.bar-text.inside{fill:#1d232b}
.iteration-end{stroke:#1d232b;stroke-width:1.5;stroke-dasharray:4 3}
.mem-bar{fill:#7b8794}.mem-bar.over{fill:#b03a2e}
.capacity{stroke:#1d232b;stroke-width:2}
.iteration-bar{fill:#9aa5b1}.iteration-bar.ours{fill:#1f3a68}.iteration-bar.over{fill:#e0a9a3}
table{border-collapse:collapse;margin:4px 16px}
td,th{border:1px solid #d5d9de;padding:1px 8px;text-align:left;font-size:12px}
#tip{position:absolute;display:none;background:#fff;border:1px solid #55606e;padding:2px 6px;
  pointer-events:none;font-size:12px}
)css";

constexpr char kScript[] = R"js(
(function () {
  var bad = [];
  var svgs = document.querySelectorAll('svg.timeline');
  if (svgs.length === 0) bad.push('no timeline');
  for (var i = 0; i < svgs.length; ++i) {
    var want = Number(svgs[i].getAttribute('data-ops'));
    var got = svgs[i].querySelectorAll('rect.op').length;
    if (want !== got) bad.push(svgs[i].id + ' has ' + got + ' of ' + want + ' ops');
  }
  if (bad.length > 0) {
    console.error('octopipe report: ' + bad.join('; '));
    return;
  }
  var tip = document.getElementById('tip');
  document.addEventListener('mousemove', function (e) {
    var t = e.target;
    if (!t.classList || !t.classList.contains('op')) {
      tip.style.display = 'none';
      return;
    }
    var s = Number(t.getAttribute('data-start-ms')), f = Number(t.getAttribute('data-end-ms'));
    tip.textContent = t.getAttribute('data-op') + ' on device ' + t.getAttribute('data-device') +
        ': ' + s.toFixed(3) + ' to ' + f.toFixed(3) + ' ms (' + (f - s).toFixed(3) + ' ms)';
    tip.style.left = (e.pageX + 12) + 'px';
    tip.style.top = (e.pageY + 12) + 'px';
    tip.style.display = 'block';
  });
  document.body.setAttribute('data-report-ready', 'true');
})();
)js";

std::string Header(const Page& page) {
  std::vector<std::string> facts = {
      absl::StrCat("iteration <b>", Seconds(page.iteration_s), "</b>"),
      absl::StrCat("bubble <b>", Percent(page.bubble_ratio), "</b>"),
      absl::StrCat("<b>", Count(page.tokens_per_s), "</b> tokens/s")};
  for (const Fact& f : page.facts) facts.push_back(absl::StrCat(Esc(f.name), " ", Esc(f.value)));
  std::string legend;
  for (const KindStyle& k : kKinds) {
    absl::StrAppend(&legend, "<span><i class=\"swatch\" style=\"background:", k.color,
                    "\"></i>", k.kind, " ", k.name, "</span>");
  }
  return absl::StrCat("<header><h1>", Esc(page.command), ": ", Esc(page.model), " on ",
                      Esc(page.cluster), "</h1><p class=\"facts\">",
                      absl::StrJoin(facts, " &middot; "), "</p><p class=\"legend\">", legend,
                      "</p></header>\n");
}

std::string SectionHtml(const Section& s, size_t i, const Axis& a) {
  std::string out = absl::StrCat("<section class=\"pipeline\" id=\"section-", i, "\"><h2>",
                                 Esc(s.title), "</h2>\n", TimelineSvg(s.plan, i, "plan", a));
  if (s.baseline.has_value()) {
    if (!s.baseline_caption.empty()) {
      absl::StrAppend(&out, "<h3 class=\"baseline-caption\">", Esc(s.baseline_caption),
                      "</h3>\n");
    }
    absl::StrAppend(&out, TimelineSvg(*s.baseline, i, "baseline", a));
  }
  absl::StrAppend(&out, ReplicaTable(s.replicas), StageTable(s.stages), MemorySvg(s.memory),
                  "</section>\n");
  return out;
}

}  // namespace

absl::string_view KindColor(absl::string_view kind) {
  for (const KindStyle& k : kKinds) {
    if (kind == k.kind) return k.color;
  }
  return "";
}

absl::StatusOr<std::string> RenderHtmlReport(const Page& page) {
  if (absl::Status s = ValidatePage(page); !s.ok()) return s;
  const Axis axis = MakeAxis(page);
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>",
      Esc(page.command), ": ", Esc(page.model), " on ", Esc(page.cluster),
      "</title><style>", kStyle,
      absl::StrFormat("header{height:%dpx}\nh2{height:%dpx;line-height:%dpx}\n", kHeaderHeightPx,
                      kSectionHeadingPx, kSectionHeadingPx),
      "</style></head>\n<body>\n", Header(page), "<main>\n");
  for (size_t i = 0; i < page.sections.size(); ++i) {
    absl::StrAppend(&out, SectionHtml(page.sections[i], i, axis));
  }
  absl::StrAppend(&out, BarsSvg(page, axis), "</main>\n<div id=\"tip\"></div>\n<script>",
                  kScript, "</script>\n</body></html>\n");
  return out;
}

absl::Status CheckReportPath(absl::string_view flag, const std::string& path) {
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot write '", path, "': ", why));
  };
  if (path.empty()) return refuse("empty path");
  struct stat st;
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) return refuse("it is a directory");
  {
    std::ofstream probe(path, std::ios::binary | std::ios::app);  // leaves the contents alone
    if (!probe) return refuse(std::strerror(errno));
  }
  if (!existed) std::remove(path.c_str());
  return absl::OkStatus();
}

absl::Status WriteHtmlReport(absl::string_view flag, const std::string& path, const Page& page) {
  absl::StatusOr<std::string> html = RenderHtmlReport(page);
  if (!html.ok()) {
    return absl::Status(html.status().code(), absl::StrCat(flag, ": ", html.status().message()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot write '", path, "': ", std::strerror(errno)));
  }
  out << *html;
  out.close();
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": writing '", path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace octopipe::report

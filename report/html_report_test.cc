#include "report/html_report.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/test_dirs.h"
#include "gtest/gtest.h"

namespace octopipe::report {
namespace {

using ::octopipe::testing::TestDir;
using ::octopipe::testing::TestPath;

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A timeline of `devices` rows; device d runs F then B of micro-batches 0..m-1, one second
// each, starting d seconds late (a 1F1B-like staircase with bubbles).
Timeline Staircase(int devices, int microbatches, const std::string& title) {
  Timeline t;
  t.title = title;
  t.devices.resize(devices);
  for (int d = 0; d < devices; ++d) {
    double clock = d;
    for (int m = 0; m < microbatches; ++m) {
      for (const char* kind : {"F", "B"}) {
        t.devices[d].push_back({kind, absl::StrCat(kind, d, ".", m), clock, clock + 1});
        clock += 1;
      }
    }
    t.iteration_s = std::max(t.iteration_s, clock);
  }
  return t;
}

Page TwoDevicePage() {
  Page page;
  page.command = "octopipe plan";
  page.model = "tiny";
  page.cluster = "two-gpus";
  page.iteration_s = 9;
  page.bubble_ratio = 0.1;
  page.tokens_per_s = 12345;
  Section s;
  s.title = "plan";
  s.plan = Staircase(2, 4, "plan");
  s.stages = {{0, 3, 0, false, "mlp x4"}, {4, 7, 1, true, "mlp x3, head"}};
  s.memory = {{"device 0", 40e9, 80e9}, {"device 1", 90e9, 80e9}};
  page.sections.push_back(s);
  page.bars = {{"plan", 9, true, true}, {"1f1b", 12, true, false}};
  page.bars_title = "iteration against the baselines";
  return page;
}

std::string Render(const Page& page) {
  absl::StatusOr<std::string> html = RenderHtmlReport(page);
  EXPECT_TRUE(html.ok()) << html.status();
  return html.ok() ? *html : "";
}

TEST(HtmlReportTest, EveryDeviceRowAndOneRectPerOp) {
  Page page = TwoDevicePage();
  page.sections[0].baseline = Staircase(2, 6, "1f1b");
  const std::string html = Render(page);
  EXPECT_EQ(Occurrences(html, "class=\"device-row\""), 4u);  // plan and baseline
  EXPECT_EQ(Occurrences(html, "<g class=\"device-row\" data-device=\"0\">"), 2u);
  EXPECT_EQ(Occurrences(html, "<g class=\"device-row\" data-device=\"1\">"), 2u);
  EXPECT_EQ(Occurrences(html, "<rect class=\"op\""), 2u * 8 + 2u * 12);
  EXPECT_NE(html.find("data-timeline=\"plan\" data-section=\"0\" data-ops=\"16\""),
            std::string::npos);
  EXPECT_NE(html.find("data-timeline=\"baseline\" data-section=\"0\" data-ops=\"24\""),
            std::string::npos);
  EXPECT_NE(html.find("data-op=\"F1.3\" data-kind=\"F\" data-device=\"1\""), std::string::npos);
  EXPECT_EQ(Occurrences(html, std::string("fill=\"") + std::string(KindColor("F")) + "\""), 20u);
  EXPECT_EQ(Occurrences(html, std::string("fill=\"") + std::string(KindColor("B")) + "\""), 20u);
}

TEST(HtmlReportTest, MemoryBarsAgainstCapacity) {
  Page page = TwoDevicePage();
  page.sections[0].memory.push_back({"device 2", 5e9, std::numeric_limits<double>::infinity()});
  const std::string html = Render(page);
  EXPECT_EQ(Occurrences(html, "<rect class=\"mem-bar"), 3u);
  EXPECT_NE(html.find("data-device=\"0\" data-peak-bytes=\"40000000000\" "
                      "data-capacity-bytes=\"80000000000\""),
            std::string::npos);
  EXPECT_NE(html.find("<rect class=\"mem-bar over\" data-device=\"1\""), std::string::npos);
  EXPECT_NE(html.find("data-capacity-bytes=\"inf\""), std::string::npos);
  EXPECT_NE(html.find("40.0 GB of 80.0 GB (50.0%)"), std::string::npos);
  EXPECT_NE(html.find("DOES NOT FIT"), std::string::npos);
  EXPECT_NE(html.find("5.0 GB (unlimited)"), std::string::npos);
  EXPECT_EQ(Occurrences(html, "<line class=\"capacity\""), 2u);
}

TEST(HtmlReportTest, StageTableHeaderAndBars) {
  const std::string html = Render(TwoDevicePage());
  EXPECT_EQ(Occurrences(html, "<tr class=\"stage-row\">"), 2u);
  EXPECT_NE(html.find("<td>1</td><td>4..7</td><td>mlp x3, head</td><td>1</td><td>yes</td>"),
            std::string::npos);
  EXPECT_NE(html.find("octopipe plan: tiny on two-gpus"), std::string::npos);
  EXPECT_NE(html.find("iteration <b>9.000 s</b>"), std::string::npos);
  EXPECT_NE(html.find("bubble <b>10.0%</b>"), std::string::npos);
  EXPECT_NE(html.find("<b>12,345</b> tokens/s"), std::string::npos);
  EXPECT_NE(html.find("<rect class=\"iteration-bar ours\" data-name=\"plan\""),
            std::string::npos);
  EXPECT_NE(html.find("<rect class=\"iteration-bar\" data-name=\"1f1b\""), std::string::npos);
}

TEST(HtmlReportTest, NamesAreEscaped) {
  Page page = TwoDevicePage();
  page.model = "<script>alert(1)</script> & \"quoted\"";
  page.cluster = "a<b & 'c'";
  page.facts = {{"origin", "baseline:<1f1b>"}};
  page.sections[0].title = "pipe <0>";
  page.sections[0].plan.device_labels = {"GPUs \"0\"", "GPUs <1>"};
  page.sections[0].replicas = {{"DP <0>", "ranks 0&1"}};
  page.bars[1].name = "x\"><script>";
  const std::string html = Render(page);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("x\"><script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;"),
            std::string::npos);
  EXPECT_NE(html.find("a&lt;b &amp; &#39;c&#39;"), std::string::npos);
  EXPECT_NE(html.find("baseline:&lt;1f1b&gt;"), std::string::npos);
  EXPECT_NE(html.find("pipe &lt;0&gt;"), std::string::npos);
  EXPECT_NE(html.find("GPUs &quot;0&quot;"), std::string::npos);
  EXPECT_NE(html.find("ranks 0&amp;1"), std::string::npos);
  EXPECT_EQ(Occurrences(html, "<script>"), 1u);  // the page's own
}

TEST(HtmlReportTest, LayoutHasOneSectionPerPipelineWithItsReplicas) {
  Page page = TwoDevicePage();
  Section second = page.sections[0];
  second.title = "pipeline 1";
  second.plan = Staircase(3, 2, "plan");
  second.replicas = {{"DP rank 1", "ranks 8-9, 10-11, 12-13"}, {"DP rank 3", "ranks 14-19"}};
  page.sections.push_back(second);
  const std::string html = Render(page);
  EXPECT_NE(html.find("id=\"section-1\""), std::string::npos);
  EXPECT_NE(html.find("id=\"timeline-1-plan\""), std::string::npos);
  EXPECT_EQ(Occurrences(html, "<tr class=\"replica-row\">"), 2u);
  EXPECT_NE(html.find("ranks 8-9, 10-11, 12-13"), std::string::npos);
  EXPECT_EQ(Occurrences(html, "class=\"device-row\""), 5u);
}

// All timelines and bars share one axis: the longest thing on the page spans the plot.
TEST(HtmlReportTest, OneTimeAxisForEveryTimelineAndBar) {
  Page page = TwoDevicePage();  // plan ends at 9 s; the 1f1b bar is 12 s
  const std::string html = Render(page);
  const double px_per_s = kPlotWidthPx / 12.0;
  // F0.0 runs 0..1 s: x at the plot's left, width one second.
  EXPECT_NE(html.find(absl::StrFormat("data-op=\"F0.0\" data-kind=\"F\" data-device=\"0\" "
                                      "data-start-ms=\"0.000000\" data-end-ms=\"1000.000000\" "
                                      "x=\"%d.00\" y=\"%d\" width=\"%.2f\"",
                                      kLabelWidthPx, kAxisHeightPx + 2, px_per_s)),
            std::string::npos)
      << html;
  EXPECT_NE(html.find(absl::StrFormat("data-name=\"1f1b\" x=\"%d\" y=\"%d\" width=\"%d.00\"",
                                      kLabelWidthPx, kAxisHeightPx + 20 + 3, kPlotWidthPx)),
            std::string::npos);
  EXPECT_NE(html.find(">12000 ms</text>"), std::string::npos);  // the last tick
}

// The browser test looks for the first timeline right under the header and its heading.
TEST(HtmlReportTest, FirstTimelineSitsUnderTheFixedHeader) {
  const std::string html = Render(TwoDevicePage());
  EXPECT_NE(html.find(absl::StrCat("header{height:", kHeaderHeightPx, "px}")), std::string::npos);
  EXPECT_NE(html.find(absl::StrCat("h2{height:", kSectionHeadingPx, "px")), std::string::npos);
  const size_t main = html.find("<main>\n<section class=\"pipeline\" id=\"section-0\"><h2>plan"
                                "</h2>\n<svg class=\"timeline\" id=\"timeline-0-plan\"");
  EXPECT_NE(main, std::string::npos);
  EXPECT_LT(html.find("</header>"), main);
  // Nothing fetched: the only URLs are the SVG namespace's.
  EXPECT_EQ(Occurrences(html, "http"), Occurrences(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(HtmlReportTest, BadInputNamesTheField) {
  struct Case {
    std::function<void(Page&)> change;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](Page& p) { p.sections.clear(); }, "sections: a page needs at least one section"},
      {[](Page& p) { p.sections[0].plan.devices[1][3].end_s = 0; },
       "sections[0].plan.devices[1].ops[3].end_s: 0 is before start_s"},
      {[](Page& p) { p.sections[0].plan.devices[0][0].kind = "X"; },
       "sections[0].plan.devices[0].ops[0].kind: unknown op kind 'X'"},
      {[](Page& p) { p.sections[0].plan.devices[0][1].start_s = std::nan(""); },
       "sections[0].plan.devices[0].ops[1].start_s: must be a finite number >= 0"},
      {[](Page& p) { p.sections[0].plan.devices.clear(); }, "sections[0].plan.devices: no device"},
      {[](Page& p) { p.sections[0].baseline = Timeline{}; },
       "sections[0].baseline.devices: no device"},
      {[](Page& p) { p.sections[0].memory[1].peak_bytes = -1; },
       "sections[0].memory[1].peak_bytes: must be a finite number >= 0, got -1"},
      {[](Page& p) { p.tokens_per_s = std::numeric_limits<double>::infinity(); },
       "tokens_per_s: must be finite"},
      {[](Page& p) { p.bars[1].iteration_s = -2; }, "bars[1].iteration_s"},
  };
  for (const Case& c : cases) {
    Page page = TwoDevicePage();
    c.change(page);
    absl::StatusOr<std::string> html = RenderHtmlReport(page);
    ASSERT_FALSE(html.ok()) << c.expect;
    EXPECT_EQ(html.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(html.status().message().find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << html.status().message();
  }
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(HtmlReportTest, CheckReportPathRefusesWhatCannotBeWrittenAndLeavesNoFile) {
  const std::string fresh = TestPath("fresh.html");
  EXPECT_TRUE(CheckReportPath("--report", fresh).ok());
  EXPECT_FALSE(Exists(fresh));
  const std::string kept = TestPath("kept.html");
  std::ofstream(kept) << "old contents";
  EXPECT_TRUE(CheckReportPath("--report", kept).ok());
  std::ifstream in(kept);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "old contents");

  const std::string a_dir = TestDir("a-directory");
  absl::Status dir = CheckReportPath("--report", a_dir);
  EXPECT_EQ(dir.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.message(),
            absl::StrCat("--report: cannot write '", a_dir, "': it is a directory"));
  const std::string missing = TestPath("no/such/dir/r.html");
  absl::Status s = CheckReportPath("--report", missing);
  EXPECT_EQ(s.message(),
            absl::StrCat("--report: cannot write '", missing, "': No such file or directory"));
  EXPECT_EQ(CheckReportPath("--report", "").message(), "--report: cannot write '': empty path");
}

TEST(HtmlReportTest, WriteHtmlReportWritesThePageOrNamesTheFlag) {
  const std::string path = TestPath("page.html");
  ASSERT_TRUE(WriteHtmlReport("--report", path, TwoDevicePage()).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), *RenderHtmlReport(TwoDevicePage()));
  Page bad = TwoDevicePage();
  bad.sections.clear();
  EXPECT_EQ(WriteHtmlReport("--report", path, bad).message(),
            "--report: sections: a page needs at least one section");
  EXPECT_NE(WriteHtmlReport("--report", TestPath("none/x.html"), TwoDevicePage())
                .message()
                .find("--report: cannot write '"),
            std::string::npos);
}

}  // namespace
}  // namespace octopipe::report

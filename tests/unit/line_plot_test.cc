// `musacoder plot`'s axis labels: neighbouring ticks never read the same, however narrow the
// range (session 32's anchor_loss panel labelled five ticks 1.4e-04), and ordinary ranges keep
// their short labels.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "report/line_plot.h"

namespace mc::report {
namespace {

TEST(LinePlot, TickLabelsTellNeighboursApart) {
  std::set<std::string> narrow;
  for (int i = 0; i < 5; ++i) narrow.insert(tick_label(1.36340e-4 + i * 1e-9, 1e-9));
  EXPECT_EQ(narrow.size(), 5u);
  EXPECT_EQ(tick_label(1.36341e-4, 1e-9), "1.36341e-04");
  EXPECT_EQ(tick_label(0.25, 0.05), "0.25");
  EXPECT_EQ(tick_label(1000, 200), "1000");
  EXPECT_EQ(tick_label(0, 0.1), "0");
  EXPECT_EQ(tick_label(2e-4, 1e-4), "2.0e-04");
  EXPECT_EQ(tick_label(1234.5, 0.1), "1234.5");
}

TEST(LinePlot, ANarrowRangeRendersDistinctLabels) {
  Panel p;
  p.title = "anchor_loss";
  p.x_label = "step";
  Series s;
  for (int i = 0; i < 6; ++i) {
    s.x.push_back(2 * (i + 1));
    s.y.push_back(1.36340e-4 + (i % 3) * 2e-9);
  }
  p.series.push_back(s);
  std::string svg = render_svg({p});
  EXPECT_NE(svg.find("1.3634"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">1.4e-04<"), std::string::npos) << svg;
}

}  // namespace
}  // namespace mc::report

namespace mc::report {
namespace {

// Two runs side by side (`bench-model compare --svg`): ticks at runs 1 and 2 only, not 1.2,
// 1.4, ...; a measured x keeps its fractional ticks.
TEST(LinePlot, WholeNumberXGetsWholeNumberTicks) {
  Panel p;
  p.title = "pass rates by run (%)";
  p.x_label = "run";
  p.series.push_back({"pass@1", {1, 2}, {26.1, 28.3}});
  std::string svg = render_svg({p});
  EXPECT_EQ(svg.find(">1.2<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">1<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">2<"), std::string::npos) << svg;
  p.series[0].x = {1, 1.9};
  EXPECT_NE(render_svg({p}).find(">1.2<"), std::string::npos);
}

}  // namespace
}  // namespace mc::report

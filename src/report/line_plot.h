// Line charts as SVG images: one panel per metric, one line per series, axes with ticks, a
// legend. What `musacoder plot` draws from runs' metrics.jsonl (training and RL curves).
#pragma once

#include <string>
#include <vector>

namespace mc::report {

struct Series {
  std::string label;
  std::vector<double> x, y;
  int color = -1;  // index into the palette; -1: the series' place in its panel. One run keeps one
                   // colour in every panel, even where another run has no points.
};

struct Panel {
  std::string title, x_label;
  std::vector<Series> series;
  bool log_y = false;
};

// Panels laid out in a grid of `columns`; returns the SVG document.
std::string render_svg(const std::vector<Panel>& panels, int columns = 2, int panel_width = 460, int panel_height = 300);

// An axis label for tick value v on an axis whose ticks are `step` apart: enough significant
// digits that neighbouring ticks read differently (at least 4; scientific below 1e-3 and from 1e5).
std::string tick_label(double v, double step);

}  // namespace mc::report

// Line charts as SVG images: one panel per metric, one line per series, axes with ticks, a
// legend. What `musacoder plot` draws from runs' metrics.jsonl (training and RL curves).
#pragma once

#include <string>
#include <vector>

namespace mc::report {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

struct Panel {
  std::string title, x_label;
  std::vector<Series> series;
  bool log_y = false;
};

// Panels laid out in a grid of `columns`; returns the SVG document.
std::string render_svg(const std::vector<Panel>& panels, int columns = 2, int panel_width = 460, int panel_height = 300);

}  // namespace mc::report

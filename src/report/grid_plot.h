// A grid of coloured cells as an SVG image: one row per item (a problem), one column per
// observation (a sample), each cell coloured by its outcome with a short text and a tooltip,
// and a legend. What `musacoder bench-model` draws per problem.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mc::report {

struct GridCell {
  std::string color = "#eeeeee";  // fill
  std::string text;               // drawn in the cell (a few characters)
  std::string tooltip;            // <title>, shown on hover
};

struct Grid {
  std::string title;
  std::vector<std::string> row_labels, col_labels;
  std::vector<std::vector<GridCell>> cells;                 // [row][column]
  std::vector<std::pair<std::string, std::string>> legend;  // (color, meaning)
};

std::string render_grid_svg(const Grid& g, int cell = 18);

}  // namespace mc::report

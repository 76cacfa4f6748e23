#include "report/grid_plot.h"

#include <algorithm>

#include <fmt/format.h>

#include "report/svg_text.h"

namespace mc::report {

std::string render_grid_svg(const Grid& g, int cell) {
  size_t label_chars = 4;
  for (const auto& l : g.row_labels) label_chars = std::max(label_chars, l.size());
  const int left = static_cast<int>(std::min<size_t>(label_chars, 48) * 6.5) + 12, top = 44;
  size_t cols = 0;
  for (const auto& r : g.cells) cols = std::max(cols, r.size());
  cols = std::max(cols, g.col_labels.size());
  const int legend_h = 22 * static_cast<int>((g.legend.size() + 3) / 4) + 10;
  const int W = std::max<int>(left + static_cast<int>(cols) * cell + 20, 520);
  const int H = top + static_cast<int>(g.cells.size()) * cell + legend_h + 10;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"10\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{3}</text>\n",
      W, H, 8, xml_escape(g.title));
  for (size_t c = 0; c < g.col_labels.size(); ++c)
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + c * cell + cell / 2, top - 6,
                     xml_escape(g.col_labels[c]));
  for (size_t r = 0; r < g.cells.size(); ++r) {
    int y = top + static_cast<int>(r) * cell;
    std::string label = r < g.row_labels.size() ? g.row_labels[r] : "";
    if (label.size() > 48) label = label.substr(0, 45) + "...";
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 6, y + cell * 0.7, xml_escape(label));
    for (size_t c = 0; c < g.cells[r].size(); ++c) {
      const GridCell& x = g.cells[r][c];
      int cx = left + static_cast<int>(c) * cell;
      s += fmt::format("<g><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"/>",
                       xml_escape(x.tooltip), cx, y, cell, cell, x.color);
      if (!x.text.empty())
        s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>", cx + cell / 2, y + cell * 0.7,
                         xml_escape(x.text));
      s += "</g>\n";
    }
  }
  int ly = top + static_cast<int>(g.cells.size()) * cell + 16;
  for (size_t i = 0; i < g.legend.size(); ++i) {
    int lx = 8 + static_cast<int>(i % 4) * 130, y = ly + static_cast<int>(i / 4) * 22;
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", lx, y,
                     g.legend[i].first, lx + 16, y + 10, xml_escape(g.legend[i].second));
  }
  return s + "</svg>\n";
}

}  // namespace mc::report

#include "recipe/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "common/jsonl.h"
#include "common/progress.h"
#include "common/subprocess.h"
#include "common/toml.h"
#include "common/utf8.h"
#include "synth/decontaminate.h"

namespace mc::recipe {
namespace {

using nlohmann::json;

// Trailing whitespace of each line and of the file does not make two files different.
std::string normalized(const std::string& s) {
  std::string out, line;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      size_t e = line.find_last_not_of(" \t\r");
      out += (e == std::string::npos ? "" : line.substr(0, e + 1)) + "\n";
      line.clear();
    } else {
      line += s[i];
    }
  }
  while (out.size() > 1 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') out.pop_back();
  return out;
}

std::vector<std::string> grams(const std::vector<std::string>& t, size_t n = 5) {
  std::vector<std::string> out;
  for (size_t i = 0; i + n <= t.size(); ++i) {
    std::string g;
    for (size_t k = 0; k < n; ++k) g += t[i + k] + '\x1f';
    out.push_back(std::move(g));
  }
  return out;
}

// KernelBench's problems: exact contents and the 5-grams of each one's normalized source.
struct Benchmark {
  std::unordered_map<std::string, std::string> exact;  // sha256 of normalized text -> file
  std::vector<std::pair<std::string, std::unordered_set<std::string>>> problems;

  explicit Benchmark(const std::string& dir) {
    if (dir.empty()) return;
    MC_CHECK(fs::is_directory(dir), "--decontaminate: no folder ", dir);
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string text = read_file(f);
      exact[sha256_hex(normalized(text))] = f.string();
      auto g = grams(synth::source_tokens(text));
      if (!g.empty()) problems.push_back({f.string(), {g.begin(), g.end()}});
    }
  }

  // The benchmark file a Python file contains (share of its 5-grams at least `share`), or "".
  std::string contained_in(const std::string& text, double share) const {
    if (problems.empty()) return "";
    auto g = grams(synth::source_tokens(text));
    std::unordered_set<std::string> mine(g.begin(), g.end());
    for (const auto& [file, theirs] : problems) {
      size_t hit = 0;
      for (const auto& x : theirs) hit += mine.count(x);
      if (hit >= share * theirs.size()) return file;
    }
    return "";
  }
};

struct SourceStats {
  int64_t files = 0, bytes = 0, held_out = 0;
  std::map<std::string, int64_t> dropped;  // reason -> files
};

std::string str_or(const toml::table& t, const char* key, const std::string& where, const std::string& def,
                   bool required = false) {
  auto v = t[key];
  if (!v) {
    MC_CHECK(!required, where, ": '", key, "' is missing");
    return def;
  }
  MC_CHECK(v.is_string(), where, ": '", key, "' must be a string");
  return std::string(*v.value<std::string>());
}

}  // namespace

CorpusOptions load_corpus_config(const std::string& path) {
  toml::table t = read_toml(path);
  CorpusOptions o;
  if (auto v = t["max_file_bytes"].value<int64_t>()) o.max_file_bytes = *v;
  if (auto v = t["contamination"].value<double>()) o.contamination = *v;
  if (auto v = t["eval_share"].value<double>()) o.eval_share = *v;
  MC_CHECK(o.eval_share >= 0 && o.eval_share < 1, path, ": eval_share must be in [0, 1), got ", o.eval_share);
  auto* arr = t["source"].as_array();
  MC_CHECK(arr && !arr->empty(), path, ": no [[source]] tables");
  for (size_t i = 0; i < arr->size(); ++i) {
    const std::string where = str_cat(path, ": [[source]] ", i + 1);
    auto* row = (*arr)[i].as_table();
    MC_CHECK(row, where, " is not a table");
    CorpusSource s;
    s.name = str_or(*row, "name", where, "", true);
    s.path = str_or(*row, "path", where, "", true);
    s.license = str_or(*row, "license", where, "", true);
    if (auto v = (*row)["max_files"].value<int64_t>()) s.max_files = *v;
    if (auto v = (*row)["synth_dataset"].value<bool>()) s.synth_dataset = *v;
    if (auto v = (*row)["optional"].value<bool>()) s.optional = *v;
    if (auto* ex = (*row)["extensions"].as_array())
      for (const auto& e : *ex) {
        MC_CHECK(e.is_string(), where, ": 'extensions' must be strings");
        s.extensions.push_back(std::string(*e.value<std::string>()));
      }
    o.sources.push_back(std::move(s));
  }
  return o;
}

std::string resolve_source(const std::string& path, const std::string& python) {
  if (path.rfind("python:", 0) == 0) {
    std::string rest = path.substr(7), module = rest.substr(0, rest.find('/'));
    std::string sub = rest.size() > module.size() ? rest.substr(module.size() + 1) : "";
    SubprocessOptions so;
    so.argv = {python, "-c", "import importlib, os, sys; m = importlib.import_module(sys.argv[1]); "
                             "print(os.path.dirname(m.__file__))", module};
    auto r = run_command(so, 60000);
    if (!r.status.ok()) {
      std::string err = r.err.substr(0, r.err.find_last_not_of("\n") + 1);
      err = err.substr(err.rfind('\n') == std::string::npos ? 0 : err.rfind('\n') + 1);  // its last line
      throw Error(str_cat("corpus source ", path, ": Python module '", module, "' cannot be imported (", err, ")"));
    }
    std::string dir = r.out.substr(0, r.out.find_last_not_of("\n") + 1);
    return sub.empty() ? dir : (fs::path(dir) / sub).string();
  }
  if (path.rfind("$", 0) == 0) {
    std::string var = path.substr(1, path.find('/') == std::string::npos ? std::string::npos : path.find('/') - 1);
    const char* v = std::getenv(var.c_str());
    MC_CHECK(v && *v, "corpus source ", path, ": $", var, " is not set");
    return std::string(v) + path.substr(1 + var.size());
  }
  return path;
}

json build_corpus(const CorpusOptions& o) {
  MC_CHECK(!o.out_dir.empty(), "corpus needs --out");
  MC_CHECK(!o.sources.empty(), "corpus: no sources");
  fs::create_directories(o.out_dir);
  Benchmark bench(o.decontaminate_dir);
  std::unordered_map<std::string, std::string> seen;  // sha256 -> the first source:path that had it
  const fs::path out(o.out_dir);
  const std::string tmp = (out / "corpus.jsonl.tmp").string(), eval_tmp = (out / "corpus-eval.jsonl.tmp").string();
  std::ofstream corpus(tmp, std::ios::binary), held(eval_tmp, std::ios::binary);
  MC_CHECK(corpus && held, "cannot write ", tmp);
  int64_t held_files = 0;
  json sources = json::array(), contaminated = json::array();
  int64_t total_files = 0, total_bytes = 0;
  for (const auto& src : o.sources) {
    SourceStats st;
    std::string where;
    try {
      where = resolve_source(src.path, o.python);
      MC_CHECK(src.synth_dataset ? fs::is_regular_file(where) : fs::is_directory(where), "corpus source ", src.name,
               ": no ", src.synth_dataset ? "dataset file " : "folder ", where, " (from ", src.path, ")");
    } catch (const Error& e) {
      if (!src.optional) throw;
      sources.push_back({{"name", src.name}, {"path", src.path}, {"license", src.license}, {"files", 0}, {"bytes", 0},
                         {"dropped", json::object()}, {"skipped", e.what()}});
      continue;
    }
    // The texts of this source: (path, text).
    std::vector<std::pair<std::string, std::string>> texts;
    if (src.synth_dataset) {
      for_each_jsonl(where, [&](const json& row, size_t no) {
        MC_CHECK(row.contains("problem") && row.contains("solution"), where, ":", no,
                 ": a synth dataset row needs \"problem\" and \"solution\"");
        texts.push_back({str_cat(where, ":", no), row["problem"].get<std::string>() + "\n\n" + row["solution"].get<std::string>()});
      });
    } else {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(where, fs::directory_options::skip_permission_denied);
           it != fs::recursive_directory_iterator(); ++it) {
        if (!it->is_regular_file()) continue;
        const std::string ext = it->path().extension().string();
        if (!src.extensions.empty() && std::find(src.extensions.begin(), src.extensions.end(), ext) == src.extensions.end())
          continue;
        files.push_back(it->path());
      }
      std::sort(files.begin(), files.end());
      if (src.max_files > 0 && static_cast<int64_t>(files.size()) > src.max_files) {
        st.dropped["over_max_files"] = static_cast<int64_t>(files.size()) - src.max_files;
        files.resize(src.max_files);
      }
      for (const auto& f : files) {
        if (static_cast<int64_t>(fs::file_size(f)) > o.max_file_bytes) {
          ++st.dropped["too_large"];
          continue;
        }
        texts.push_back({f.string(), read_file(f)});
      }
    }
    ProgressBar bar("corpus " + src.name, texts.size(), o.progress);
    for (auto& [path, text] : texts) {
      bar.advance(1);
      if (text.find('\0') != std::string::npos || !is_valid_utf8(text)) {
        ++st.dropped["binary"];
        continue;
      }
      std::string norm = normalized(text);
      if (norm.find_first_not_of(" \t\r\n") == std::string::npos) {
        ++st.dropped["empty"];
        continue;
      }
      const std::string digest = sha256_hex(norm);
      if (auto b = bench.exact.find(digest); b != bench.exact.end()) {
        ++st.dropped["kernelbench_copy"];
        contaminated.push_back({{"source", src.name}, {"path", path}, {"benchmark", b->second}, {"rule", "copy"}});
        continue;
      }
      if (path.size() > 3 && (path.compare(path.size() - 3, 3, ".py") == 0 || src.synth_dataset)) {
        std::string hit = bench.contained_in(text, o.contamination);
        if (!hit.empty()) {
          ++st.dropped["kernelbench_near_copy"];
          contaminated.push_back({{"source", src.name}, {"path", path}, {"benchmark", hit}, {"rule", "near_copy"}});
          continue;
        }
      }
      if (!seen.emplace(digest, src.name + ":" + path).second) {
        ++st.dropped["duplicate"];
        continue;
      }
      const std::string row = json{{"text", norm}, {"source", src.name}, {"path", path}}.dump() + "\n";
      // Held out by content hash: the first two bytes of the digest as a fraction of 65536.
      if (std::stoul(digest.substr(0, 4), nullptr, 16) < o.eval_share * 65536) {
        held << row;
        ++st.held_out;
        ++held_files;
        continue;
      }
      corpus << row;
      ++st.files;
      st.bytes += static_cast<int64_t>(norm.size());
    }
    total_files += st.files;
    total_bytes += st.bytes;
    sources.push_back({{"name", src.name}, {"path", src.path}, {"resolved", where}, {"license", src.license},
                       {"files", st.files}, {"bytes", st.bytes}, {"held_out", st.held_out}, {"dropped", st.dropped}});
  }
  corpus.close();
  held.close();
  MC_CHECK(corpus && held, "writing ", tmp, " failed");
  fs::rename(tmp, out / "corpus.jsonl");
  fs::rename(eval_tmp, out / "corpus-eval.jsonl");
  json report = {{"sources", sources},
                 {"files", total_files},
                 {"held_out_files", held_files},
                 {"eval_share", o.eval_share},
                 {"bytes", total_bytes},
                 {"decontaminated_against", o.decontaminate_dir},
                 {"benchmark_files", bench.problems.size()},
                 {"contaminated", contaminated},
                 {"max_file_bytes", o.max_file_bytes},
                 {"contamination_share", o.contamination}};
  write_file_atomic(out / "report.json", report.dump(2) + "\n");
  std::string md = "| source | licence | files | MB | held out | dropped |\n| --- | --- | ---: | ---: | ---: | --- |\n";
  for (const auto& s : sources) {
    std::string dropped;
    for (const auto& [k, v] : s["dropped"].items()) dropped += (dropped.empty() ? "" : ", ") + k + " " + std::to_string(v.get<int64_t>());
    if (s.contains("skipped")) dropped = "skipped: " + s["skipped"].get<std::string>();
    md += fmt::format("| {} | {} | {} | {:.2f} | {} | {} |\n", s["name"].get<std::string>(), s["license"].get<std::string>(),
                      s["files"].get<int64_t>(), s["bytes"].get<int64_t>() / 1e6, s.value("held_out", int64_t{0}),
                      dropped.empty() ? "-" : dropped);
  }
  md += fmt::format("| **all** | | {} | {:.2f} | {} | {} dropped as KernelBench copies |\n", total_files, total_bytes / 1e6,
                    held_files, contaminated.size());
  write_file_atomic(out / "report.md", md);
  // After the report, which says per source what was dropped and why.
  MC_CHECK(total_files > 0, "corpus: every file was dropped or no source had any (", (out / "report.json").string(), ")");
  return report;
}

}  // namespace mc::recipe

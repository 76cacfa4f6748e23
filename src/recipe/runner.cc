#include "recipe/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"
#include "common/fs.h"
#include "common/gpus.h"
#include "common/home.h"
#include "common/progress.h"
#include "common/subprocess.h"
#include "common/toml.h"
#include "eval/compile_pool.h"

namespace mc::recipe {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A list var's value in the placeholder table: its elements after this mark, each ended by it.
constexpr const char* kListMark = "\x1f";

std::string join_list(const std::vector<std::string>& xs) {
  std::string s = kListMark;
  for (const auto& x : xs) s += x + kListMark;
  return s;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 1;  // after the leading mark
  for (size_t j; (j = s.find(kListMark, i)) != std::string::npos; i = j + 1) out.push_back(s.substr(i, j - i));
  return out;
}

std::string scalar(const toml::node& n, const std::string& where) {
  if (auto s = n.value<std::string>()) return *s;
  if (n.is_integer()) return std::to_string(*n.value<int64_t>());
  if (n.is_floating_point()) return fmt::format("{}", *n.value<double>());
  if (auto b = n.value<bool>()) return *b ? "true" : "false";
  throw Error(str_cat(where, " must be a string, a number or a boolean"));
}

std::string tail_lines(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

// SIGINT/SIGTERM while a stage runs (a GPU slice's time limit): the stage's command group gets
// SIGTERM (SIGKILL 30 s later), the stage stays unfinished, and the next run starts it again.
volatile std::sig_atomic_t g_stop = 0;
void on_stop(int sig) { g_stop = sig; }

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A stage's share of the compile workers when `sharing` stages run at once: the half of the
// cores that one command would take alone, split between them.
int compile_share(size_t sharing) {
  return std::max(1, eval::half_the_cores() / static_cast<int>(std::max<size_t>(1, sharing)));
}

}  // namespace

std::string last_checkpoint(const std::string& dir) {
  const fs::path ck = fs::path(dir) / "checkpoints";
  if (!fs::is_directory(ck)) return "";
  std::string best;
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && fs::exists(e.path() / "config.json") && n > fs::path(best).filename().string())
      best = e.path().string();
  }
  return best;
}

Recipe load_recipe(const std::string& path) {
  toml::table t = read_toml(path);
  Recipe r;
  r.path = fs::absolute(path).string();
  if (auto* vars = t["vars"].as_table())
    for (const auto& [k, v] : *vars) {
      const std::string where = str_cat(path, ": vars.", k.str());
      if (auto* arr = v.as_array()) {
        auto& list = r.lists[std::string(k.str())];
        for (size_t i = 0; i < arr->size(); ++i) list.push_back(scalar((*arr)[i], str_cat(where, "[", i, "]")));
      } else {
        r.vars[std::string(k.str())] = scalar(v, where);
      }
    }
  auto* stages = t["stage"].as_array();
  MC_CHECK(stages && !stages->empty(), path, ": no [[stage]] tables");
  static const std::regex name_re(R"([a-z0-9][a-z0-9_-]*)");
  std::set<std::string> names;
  for (size_t i = 0; i < stages->size(); ++i) {
    auto* st = (*stages)[i].as_table();
    std::string where = str_cat(path, ": [[stage]] ", i + 1);
    MC_CHECK(st, where, " is not a table");
    RecipeStage s;
    auto name = (*st)["name"].value<std::string>();
    MC_CHECK(name && std::regex_match(*name, name_re), where, ": 'name' must be lower-case letters, digits, '-' or '_'");
    s.name = *name;
    where = str_cat(path, ": stage '", s.name, "'");
    MC_CHECK(names.insert(s.name).second, where, " appears twice");
    s.about = (*st)["about"].value_or(std::string());
    auto* cmds = (*st)["commands"].as_array();
    MC_CHECK(cmds && !cmds->empty(), where, ": 'commands' must be a non-empty array of argument arrays");
    for (size_t c = 0; c < cmds->size(); ++c) {
      auto* argv = (*cmds)[c].as_array();
      MC_CHECK(argv && !argv->empty(), where, ": commands[", c, "] must be a non-empty array of strings");
      std::vector<std::string> args;
      for (const auto& a : *argv) args.push_back(scalar(a, str_cat(where, ": commands[", c, "]")));
      s.commands.push_back(std::move(args));
    }
    if (auto* g = (*st).get("together")) {
      MC_CHECK(g->is_string() && !g->value<std::string>()->empty(), where, ": 'together' must be a group's name (a string)");
      s.together = *g->value<std::string>();
    }
    if (auto* pg = (*st).get("together_per_gpu")) {
      MC_CHECK(!s.together.empty(), where, ": 'together_per_gpu' belongs to a stage of a `together` group");
      MC_CHECK(pg->is_integer() && *pg->value<int64_t>() >= 1, where, ": 'together_per_gpu' must be a whole number >= 1");
      s.per_gpu = static_cast<int>(*pg->value<int64_t>());
    }
    if (auto* gm = (*st).get("together_gpu_mib")) {
      MC_CHECK(!s.together.empty(), where, ": 'together_gpu_mib' belongs to a stage of a `together` group");
      MC_CHECK(gm->is_integer() && *gm->value<int64_t>() >= 1, where,
               ": 'together_gpu_mib' must be a whole number of MiB >= 1 (the GPU memory one of the group holds at its peak)");
      s.gpu_mib = *gm->value<int64_t>();
    }
    if (auto* uses = (*st).get("uses")) {
      auto* arr = uses->as_array();
      MC_CHECK(arr, where, ": 'uses' must be an array of earlier stages' names");
      for (size_t u = 0; u < arr->size(); ++u) {
        std::string n = scalar((*arr)[u], str_cat(where, ": uses[", u, "]"));
        MC_CHECK(names.count(n) && n != s.name, where, ": uses[", u, "] '", n,
                 "' is not a stage before it (a stage reads what earlier ones made)");
        s.uses.push_back(std::move(n));
      }
    }
    if (auto* env = (*st)["env"].as_table())
      for (const auto& [k, v] : *env) s.env[std::string(k.str())] = scalar(v, str_cat(where, ": env.", k.str()));
    r.stages.push_back(std::move(s));
  }
  // A group runs its stages in waves of one `together_per_gpu`: every stage of it says the same.
  std::map<std::string, const RecipeStage*> first_of;
  for (const auto& s : r.stages) {
    if (s.together.empty()) continue;
    auto [it, fresh] = first_of.emplace(s.together, &s);
    MC_CHECK(fresh || it->second->per_gpu == s.per_gpu, path, ": stage '", s.name, "': 'together_per_gpu' ",
             s.per_gpu ? std::to_string(s.per_gpu) : std::string("unset"), " differs from stage '", it->second->name,
             "' of the same group '", s.together, "' (",
             it->second->per_gpu ? std::to_string(it->second->per_gpu) : std::string("unset"), ")");
  }
  return r;
}

std::string stale_reason(const Recipe& r, const json& stages, const std::string& name) {
  auto finished = [&](const std::string& n) -> std::string {
    if (!stages.contains(n) || !stages[n].is_object() || !stages[n].value("done", false)) return "";
    return stages[n].value("finished_at", std::string());
  };
  const std::string at = finished(name);
  if (at.empty()) return "";
  auto it = std::find_if(r.stages.begin(), r.stages.end(), [&](const RecipeStage& s) { return s.name == name; });
  if (it == r.stages.end()) return "";
  for (const auto& u : it->uses) {
    const std::string u_at = finished(u);
    if (u_at.empty()) continue;
    // finished_at is ISO 8601 UTC to the second: later is greater.
    if (u_at > at) return str_cat(u, ", which it reads, finished after it (", u_at, " against ", at, ")");
    std::string why = stale_reason(r, stages, u);
    if (!why.empty()) return str_cat("it reads ", u, ", and ", why);
  }
  return "";
}

std::vector<std::string> visible_gpus() {
  if (auto ids = cuda_visible_devices()) return *ids;
  std::vector<std::string> out;
  std::error_code ec;
  for (int i = 0; fs::exists("/dev/nvidia" + std::to_string(i), ec); ++i) out.push_back(std::to_string(i));
  return out;
}

int fitting_per_gpu(int asked, int64_t stage_mib, int64_t gpu_mib) {
  if (stage_mib <= 0 || gpu_mib <= 0) return asked;
  const int fit = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(gpu_mib / stage_mib, 1 << 20)));
  return asked > 0 ? std::min(asked, fit) : fit;
}

int64_t gpu_memory_mib(const std::vector<std::string>& gpus) {
  if (gpus.empty()) return 0;
  SubprocessOptions so;
  so.argv = {"nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i",
             fmt::format("{}", fmt::join(gpus, ","))};
  try {
    auto r = run_command(so, 10000);
    if (!r.status.ok()) return 0;
    int64_t least = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const int64_t mib = std::atoll(line.c_str());
      if (mib <= 0) return 0;
      least = least == 0 ? mib : std::min(least, mib);
    }
    return least;
  } catch (const std::exception&) {
    return 0;
  }
}

namespace {

// A list var's element may itself name a list var: expanded in turn, so many levels deep at most.
constexpr int kListDepth = 8;

void expand_into(std::vector<std::string>& out, const std::string& arg, const std::map<std::string, std::string>& values,
                 const std::string& run_dir, bool check_only, int depth) {
  auto v = arg.size() > 2 && arg.front() == '{' && arg.back() == '}' ? values.find(arg.substr(1, arg.size() - 2)) : values.end();
  if (v != values.end() && v->second.rfind(kListMark, 0) == 0) {
    MC_CHECK(depth < kListDepth, "recipe: list var ", arg, " names list vars more than ", kListDepth,
             " levels deep (does a list name itself?)");
    for (const auto& e : split_list(v->second)) expand_into(out, e, values, run_dir, check_only, depth + 1);
    return;
  }
  std::string x = expand(arg, values, run_dir, check_only);
  if (!x.empty() || arg.empty()) out.push_back(x);  // a placeholder that expands to nothing drops out
}

}  // namespace

std::vector<std::string> expand_arg(const std::string& arg, const std::map<std::string, std::string>& values,
                                    const std::string& run_dir, bool check_only) {
  std::vector<std::string> out;
  expand_into(out, arg, values, run_dir, check_only, 0);
  return out;
}

std::string expand(const std::string& arg, const std::map<std::string, std::string>& values, const std::string& run_dir,
                   bool check_only) {
  std::string out;
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] != '{') {
      out += arg[i];
      continue;
    }
    // The placeholder ends at the brace that closes it ({last:{run}/x} nests one level).
    size_t depth = 0, j = i;
    for (; j < arg.size(); ++j) {
      if (arg[j] == '{') ++depth;
      else if (arg[j] == '}' && --depth == 0) break;
    }
    MC_CHECK(j < arg.size(), "recipe: unclosed '{' in \"", arg, "\"");
    std::string key = arg.substr(i + 1, j - i - 1);
    i = j;
    auto dir_of = [&](const std::string& d) {
      std::string x = expand(d, values, run_dir, check_only);
      return fs::path(x).is_absolute() ? x : (fs::path(run_dir) / x).string();
    };
    if (check_only && (key.rfind("last:", 0) == 0 || key.rfind("resume:", 0) == 0)) {
      (void)dir_of(key.substr(key.find(':') + 1));
    } else if (key.rfind("last:", 0) == 0) {
      std::string dir = dir_of(key.substr(5));
      std::string ck = last_checkpoint(dir);
      MC_CHECK(!ck.empty(), "recipe: ", dir, " has no checkpoint (", "{", key, "}): has its stage run?");
      out += ck;
    } else if (key.rfind("resume:", 0) == 0) {
      if (!last_checkpoint(dir_of(key.substr(7))).empty()) out += "--resume";
    } else {
      auto v = values.find(key);
      MC_CHECK(v != values.end(), "recipe: unknown placeholder {", key, "} in \"", arg, "\"");
      MC_CHECK(v->second.rfind(kListMark, 0) != 0, "recipe: {", key, "} is a list of arguments: it must be a whole argument, not part of \"",
               arg, "\"");
      out += expand(v->second, values, run_dir, check_only);  // a var may name another
    }
  }
  return out;
}

json run_recipe(const Recipe& r, const RunOptions& o) {
  MC_CHECK(!o.run_dir.empty(), "recipe needs --out RUN");
  fs::create_directories(fs::path(o.run_dir) / "recipe");
  const std::string run = fs::absolute(o.run_dir).string();
  const fs::path state_path = fs::path(run) / "recipe" / "state.json";
  json state = fs::exists(state_path) ? json::parse(read_file(state_path)) : json::object();
  if (!state.contains("stages")) state["stages"] = json::object();
  state["recipe"] = r.path;

  std::map<std::string, std::string> values;
  const std::string bin = self_exe();
  values["run"] = run;
  values["bin"] = bin;
  values["model_bin"] = (fs::path(bin).parent_path() / "musacoder-model").string();
  values["root"] = musacoder_home();
  const char* py = std::getenv("MUSACODER_PYTHON");  // the interpreter MooreEval's toolchain uses
  values["python"] = py && *py ? py : "python3";
  values["recipe"] = fs::path(r.path).parent_path().string();
  for (const auto& [k, v] : r.vars) values["var." + k] = v;
  for (const auto& [k, v] : r.lists) values["var." + k] = join_list(v);
  for (const auto& [k, v] : o.set) {
    MC_CHECK(r.vars.count(k) || r.lists.count(k), "--set ", k, ": the recipe has no such var (its [vars]: ", [&] {
      std::string s;
      for (const auto& [n, _] : r.vars) s += (s.empty() ? "" : ", ") + n;
      for (const auto& [n, _] : r.lists) s += (s.empty() ? "" : ", ") + n;
      return s;
    }(), ")");
    if (r.lists.count(k)) {
      std::istringstream words(v);
      std::vector<std::string> xs;
      for (std::string w; words >> w;) xs.push_back(w);
      values["var." + k] = join_list(xs);
    } else {
      values["var." + k] = v;
    }
  }
  state["vars"] = json::object();
  for (const auto& [k, v] : values)
    if (k.rfind("var.", 0) == 0)
      state["vars"][k.substr(4)] = v.rfind(kListMark, 0) == 0 ? json(split_list(v)) : json(v);

  // Every placeholder of every stage is known before anything runs: a typo in the last stage
  // should not cost the hours of the ones before it.
  for (const auto& s : r.stages) {
    try {
      for (const auto& cmd : s.commands)
        for (const auto& a : cmd) (void)expand_arg(a, values, run, true);
      for (const auto& [k, v] : s.env) (void)expand(v, values, run, true);
    } catch (const Error& e) {
      throw Error(str_cat(r.path, ": stage '", s.name, "': ", e.what()));
    }
  }

  std::set<std::string> known;
  for (const auto& s : r.stages) known.insert(s.name);
  for (const auto& n : o.only) MC_CHECK(known.count(n), "--stages: the recipe has no stage '", n, "'");
  MC_CHECK(o.from.empty() || known.count(o.from), "--from: the recipe has no stage '", o.from, "'");
  std::vector<const RecipeStage*> todo;
  bool started = o.from.empty();
  for (const auto& s : r.stages) {
    if (s.name == o.from) started = true;
    if (!started) {
      MC_CHECK(state["stages"].contains(s.name) && state["stages"][s.name].value("done", false), "--from ", o.from,
               ": the stage before it, '", s.name, "', has not finished");
      continue;
    }
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), s.name) == o.only.end()) continue;
    todo.push_back(&s);
  }
  const bool gpu = fs::exists("/dev/nvidia0");
  g_stop = 0;
  std::signal(SIGINT, on_stop);
  std::signal(SIGTERM, on_stop);
  ProgressBar bar("recipe", todo.size(), o.progress);
  std::ofstream stages_log(fs::path(run) / "recipe" / "stages.jsonl", std::ios::app);
  std::mutex mu;  // state, state.json, stages.jsonl and the bar, which stages of a group share
  // state.json may be shared with another `recipe` on this run folder (evaluations on one GPU
  // while the arms train on another): each save rereads it under a lock and replaces only the
  // stages this process runs, so neither loses what the other recorded.
  std::set<std::string> mine;
  auto save_state = [&] {
    FileLock lock(fs::path(run) / "recipe" / "state.lock");
    json disk = fs::exists(state_path) ? json::parse(read_file(state_path)) : json::object();
    if (!disk.contains("stages")) disk["stages"] = json::object();
    for (const auto& n : mine) disk["stages"][n] = state["stages"][n];
    disk["recipe"] = state["recipe"];
    disk["vars"] = state["vars"];
    write_file_atomic(state_path, disk.dump(1) + "\n");
  };

  // One stage's commands in order. Returns "" when they all exit 0, else what went wrong (and
  // records it); `stopped` is set when SIGINT/SIGTERM stopped it.
  // `sharing`: how many stages run at once, this one included. Each of our commands sizes its
  // compile pool to half the machine's cores as if it had the machine to itself; side by side,
  // five RL arms on 64 cores (H100 x4) took 7-10x the solo time to verify a step.
  // So a stage of a wave gets its share (MUSACODER_COMPILE_WORKERS), unless the caller's
  // environment or the stage's `env` names one.
  const char* own_workers = std::getenv("MUSACODER_COMPILE_WORKERS");
  auto run_stage = [&](const RecipeStage* s, bool& stopped, const std::string& on_gpu, size_t sharing) -> std::string {
    const std::string log = (fs::path(run) / "recipe" / (s->name + ".log")).string();
    {
      std::lock_guard<std::mutex> lock(mu);
      mine.insert(s->name);
      json& st = state["stages"][s->name];
      fmt::print(stderr, "recipe: {}: {} (log {})\n", s->name, s->about, log);
      st["done"] = false;
      st["started_at"] = now_utc();
      st["commands"] = json::array();
      if (!s->together.empty()) st["together"] = s->together;
      if (!on_gpu.empty()) st["gpu"] = on_gpu;
      else st.erase("gpu");
      save_state();
    }
    auto t0 = Clock::now();
    for (const auto& cmd : s->commands) {
      std::vector<std::string> argv;
      for (const auto& a : cmd)
        for (auto& x : expand_arg(a, values, run)) argv.push_back(std::move(x));
      std::string shown;
      for (const auto& a : argv) shown += (shown.empty() ? "" : " ") + a;
      {
        std::lock_guard<std::mutex> lock(mu);
        state["stages"][s->name]["commands"].push_back(shown);
      }
      {
        std::ofstream l(log, std::ios::app);
        l << "\n$ " << shown << "\n";
      }
      SubprocessOptions so;
      // Both streams to the stage's log; "$@" keeps every argument as it is.
      so.argv = {"/bin/sh", "-c", "exec \"$@\" >>\"$MC_RECIPE_LOG\" 2>&1", "sh"};
      so.argv.insert(so.argv.end(), argv.begin(), argv.end());
      so.env_set["MC_RECIPE_LOG"] = log;
      if (!on_gpu.empty()) so.env_set["CUDA_VISIBLE_DEVICES"] = on_gpu;
      if (sharing > 1 && !(own_workers && *own_workers))
        so.env_set["MUSACODER_COMPILE_WORKERS"] = std::to_string(compile_share(sharing));
      for (const auto& [k, v] : s->env) so.env_set[k] = expand(v, values, run);
      so.capture_stdout = so.capture_stderr = false;
      Subprocess p(so);
      while (p.running() && !g_stop) usleep(100 * 1000);
      if (g_stop) {
        p.kill_group(SIGTERM);
        for (int i = 0; i < 300 && p.running(); ++i) usleep(100 * 1000);
        p.kill_group(SIGKILL);
        p.wait();
        std::lock_guard<std::mutex> lock(mu);
        state["stages"][s->name]["stopped"] = str_cat(signal_name(g_stop), " during: ", shown);
        save_state();
        stopped = true;
        return str_cat("recipe stopped by ", signal_name(g_stop), " in stage '", s->name,
                       "'; it runs again (and resumes) next time");
      }
      ExitStatus es = p.wait();
      if (!es.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        state["stages"][s->name]["failed"] = shown;
        save_state();
        return str_cat("recipe stage '", s->name, "' failed (", es.describe(), "): ", shown, "\nits log, ", log, ", ends:\n",
                       tail_lines(log, 25));
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mu);
    json& st = state["stages"][s->name];
    st["done"] = true;
    st["seconds"] = secs;
    st["device"] = gpu ? "gpu" : "cpu";
    st["finished_at"] = now_utc();
    st.erase("failed");
    st.erase("stopped");
    save_state();
    json row = {{"stage", s->name}, {"seconds", secs}, {"device", st["device"]}, {"finished_at", st["finished_at"]}};
    if (!s->together.empty()) row["together"] = s->together;
    if (!on_gpu.empty()) row["gpu"] = on_gpu;
    stages_log << row.dump() << "\n";
    stages_log.flush();
    bar.advance(1, s->name);
    return "";
  };

  for (size_t i = 0; i < todo.size();) {
    // The stages to run now: one, or the group of stages next to it that share its `together`
    // (those of the group that finished before are skipped, the rest run at once).
    size_t j = i + 1;
    if (!todo[i]->together.empty())
      while (j < todo.size() && todo[j]->together == todo[i]->together) ++j;
    std::vector<const RecipeStage*> now;
    for (size_t k = i; k < j; ++k) {
      const RecipeStage* s = todo[k];
      json& st = state["stages"][s->name];
      if (!st.is_object()) st = json::object();
      if (st.value("done", false) && !o.redo) {
        fmt::print(stderr, "recipe: {} finished before ({:.0f} s); skipped\n", s->name, st.value("seconds", 0.0));
        // A stage the recipe has since grown (a seed packed before synth made RL's problems):
        // what the new commands make is missing, and a later stage will say so. Say why here.
        if (st.contains("commands") && st["commands"].is_array() && st["commands"].size() < s->commands.size())
          fmt::print(stderr, "recipe: warning: {} finished with {} command(s) where the recipe now has {}: its newer "
                     "outputs are missing (run it again: --stages {} --redo)\n", s->name, st["commands"].size(),
                     s->commands.size(), s->name);
        const std::string stale = stale_reason(r, state["stages"], s->name);
        if (!stale.empty())
          fmt::print(stderr, "recipe: warning: {} may be stale: {} (run it again: --stages {} --redo)\n", s->name,
                     stale, s->name);
        bar.advance(1, s->name);
        continue;
      }
      // Run now, it reads what the stages it uses made: say so where one of those may be stale.
      for (const auto& u : s->uses) {
        const std::string stale = stale_reason(r, state["stages"], u);
        if (!stale.empty())
          fmt::print(stderr, "recipe: warning: {} reads {}, which may be stale: {} (run it again: --stages {} --redo)\n",
                     s->name, u, stale, u);
      }
      now.push_back(s);
    }
    i = j;
    if (now.empty()) continue;
    std::vector<std::string> errors(now.size());
    std::vector<char> stopped(now.size(), 0);
    if (now.size() == 1) {
      bool st = false;
      errors[0] = run_stage(now[0], st, "", 1);
      stopped[0] = st;
    } else {
      // Spread over the GPUs, one each in turn; at most per_gpu of them on one GPU at a time.
      const size_t ngpu = o.gpus.size() >= 2 ? o.gpus.size() : 1;
      const int asked = o.per_gpu > 0 ? o.per_gpu : now[0]->per_gpu;
      int64_t need = 0;
      for (const auto* s : now) need = std::max(need, s->gpu_mib);
      const int per_gpu = fitting_per_gpu(asked, need, o.gpu_mib);
      if (per_gpu != asked)
        fmt::print(stderr, "recipe: {}: {} a GPU, not {}: each may hold {} MiB (together_gpu_mib) and a GPU has {} MiB\n",
                   now[0]->together, per_gpu, asked > 0 ? std::to_string(asked) : std::string("all"), need, o.gpu_mib);
      const size_t wave = per_gpu > 0 ? std::min(now.size(), static_cast<size_t>(per_gpu) * ngpu) : now.size();
      fmt::print(stderr, "recipe: {} stages together ({}", now.size(), now[0]->together);
      if (ngpu > 1) fmt::print(stderr, ", over {} GPUs", ngpu);
      if (wave < now.size()) fmt::print(stderr, ", {} at a time", wave);
      fmt::print(stderr, "):");
      for (const auto* s : now) fmt::print(stderr, " {}", s->name);
      fmt::print(stderr, "\n");
      for (size_t first = 0; first < now.size() && !g_stop; first += wave) {
        std::vector<std::thread> threads;
        const size_t sharing = std::min(now.size(), first + wave) - first;
        for (size_t k = first; k < std::min(now.size(), first + wave); ++k)
          threads.emplace_back([&, k, first, sharing] {
            bool st = false;
            const std::string on_gpu = ngpu > 1 ? o.gpus[(k - first) % ngpu] : "";
            try {
              errors[k] = run_stage(now[k], st, on_gpu, sharing);
            } catch (const std::exception& e) {
              errors[k] = str_cat("recipe stage '", now[k]->name, "': ", e.what());
            }
            stopped[k] = st;
          });
        for (auto& t : threads) t.join();
      }
    }
    for (size_t k = 0; k < now.size(); ++k)
      if (stopped[k]) throw Error(errors[k]);
    std::string failed;
    for (size_t k = 0; k < now.size(); ++k)
      if (!errors[k].empty()) failed += (failed.empty() ? "" : "\n") + errors[k];
    if (!failed.empty()) throw Error(failed);
  }
  return state;
}

}  // namespace mc::recipe

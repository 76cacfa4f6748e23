#include "cli/run_record.h"

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/home.h"
#include "common/subprocess.h"

namespace mc::cli {
namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> argv;
  return argv;
}

// `git -C home ARGS` stdout, trimmed; nullopt when git or the checkout is not there.
std::optional<std::string> git(const std::vector<std::string>& args) {
  SubprocessOptions so;
  so.argv = {"git", "-C", musacoder_home()};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  try {
    Subprocess p(so);
    if (!p.wait(10000).ok()) return std::nullopt;
    std::string out = p.stdout_text();
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

void set_command_line(int argc, char** argv) { command_line().assign(argv, argv + argc); }

void write_run_record(const std::string& dir, const std::string& command, const CLI::App& sub) {
  if (const char* rank = std::getenv("RANK"); rank && std::string(rank) != "0") return;
  // A folder that cannot be made is the command's to report, in its own words (it checks --out
  // before any work); the record is skipped then.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;
  using nlohmann::json;
  json options = json::object(), given = json::array();
  for (const CLI::Option* o : sub.get_options()) {
    const std::string name = o->get_name();
    if (name.rfind("--", 0) != 0 || name == "--help") continue;
    const bool flag = o->get_expected_max() == 0;  // takes no value
    if (o->count() > 0) {
      given.push_back(name);
      const auto& r = o->results();
      options[name] = flag ? json(true) : r.size() == 1 ? json(r[0]) : json(r);
    } else if (flag) {
      options[name] = false;
    } else if (!o->get_default_str().empty()) {
      options[name] = o->get_default_str();
    }
  }
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  auto commit = git({"rev-parse", "HEAD"});
  auto status = commit ? git({"status", "--porcelain", "--untracked-files=no"}) : std::nullopt;
  json inv = {{"argv", command_line()}, {"options", options},         {"given", given},
              {"commit", commit ? json(*commit) : json(nullptr)},   {"dirty", status ? json(!status->empty()) : json(nullptr)},
              {"started_at", when}};
  const fs::path path = fs::path(dir) / "run.json";
  json rec = {{"format_version", 1}, {"command", command}, {"invocations", json::array()}};
  if (fs::exists(path, ec)) {
    json old = json::parse(read_file(path), nullptr, false);
    if (!old.is_discarded() && old.value("command", "") == command && old.contains("invocations")) rec = old;
  }
  rec["invocations"].push_back(inv);
  write_file_atomic(path, rec.dump(2) + "\n");
}

}  // namespace mc::cli

#include "eval/nvcc_phases.h"

#include <regex>
#include <sstream>

#include "common/fs.h"
#include "common/hash.h"
#include "common/subprocess.h"

namespace mc::eval {
namespace {

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string first_word(const std::string& s) {
  std::string w = s.substr(0, s.find(' '));
  if (!w.empty() && w.front() == '"') w = w.substr(1, w.size() - 2);
  return fs::path(w).filename().string();
}

}  // namespace

std::optional<NvccPhases> plan_nvcc_phases(const std::vector<std::string>& argv,
                                           const std::string& dir,
                                           const std::string& module_id_seed, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<NvccPhases> {
    if (why) *why = w;
    return std::nullopt;
  };
  fs::path keep = fs::path(dir) / "nvcc-phases";
  fs::create_directories(keep);
  SubprocessOptions o;
  o.argv = argv;
  for (const char* a : {"--dryrun", "--keep", "--keep-dir"}) o.argv.push_back(a);
  o.argv.push_back(keep.string());
  o.cwd = dir;
  RunResult r = run_command(o, 60000);
  if (!r.status.ok()) return fail("nvcc --dryrun failed: " + r.status.describe());

  std::vector<std::string> env, cmds;
  static const std::regex assign(R"(^[A-Za-z_][A-Za-z0-9_]*=.*$)");
  std::istringstream lines(r.out + r.err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#$ ", 0) != 0) continue;
    std::string body = line.substr(3);
    if (std::regex_match(body, assign)) {
      // nvcc prints its settings loosely (`SYSTEM_INCLUDES="-isystem" "/x"`): each value is
      // taken as one literal string, as nvcc itself uses it.
      std::string name = body.substr(0, body.find('='));
      std::string value = body.substr(body.find('=') + 1);
      while (!value.empty() && value.back() == ' ') value.pop_back();
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"' &&
          value.find('"', 1) == value.size() - 1)
        value = value.substr(1, value.size() - 2);
      std::string quoted = "'";
      for (char c : value) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      env.push_back("export " + name + "=" + quoted + "'");
    } else {
      cmds.push_back(body);
    }
  }
  // The shape this path knows: host front end, device compiler, final host compile.
  static const std::vector<std::string> kShape = {"gcc", "cudafe++", "gcc", "cicc",
                                                  "ptxas", "fatbinary", "gcc"};
  std::vector<std::string> kinds;
  for (const auto& c : cmds) kinds.push_back(first_word(c));
  // Some nvcc versions delete the .fatbin after embedding it: tolerated at the end of device.
  std::vector<std::string> device_tail;
  if (kinds.size() == 8 && kinds[6] == "rm") {
    device_tail.push_back(cmds[6]);
    cmds.erase(cmds.begin() + 6);
    kinds.erase(kinds.begin() + 6);
  }
  if (kinds != kShape) return fail("unexpected nvcc plan (" + std::to_string(kinds.size()) + " steps)");
  if (has(cmds[0], "-D__CUDA_ARCH__=") || !has(cmds[2], "-D__CUDA_ARCH__=") ||
      !has(cmds[1], "--gen_module_id_file") || !has(cmds[3], "--module_id_file_name") ||
      !has(cmds[6], " -c "))
    return fail("nvcc plan differs from the expected phases");

  // cudafe++ reads the module id instead of writing it; cicc reads the same file.
  static const std::regex id_file(R"re(--module_id_file_name\s+"?([^"\s]+)"?)re");
  std::smatch m;
  if (!std::regex_search(cmds[1], m, id_file)) return fail("no module id file in the plan");
  std::string id_path = m[1];
  std::string digest = sha256_hex(module_id_seed);
  write_file_atomic(id_path, "_" + digest.substr(0, 8) + "_7_cuda_cu_" + digest.substr(8, 8));
  std::string cudafe = std::regex_replace(cmds[1], std::regex("--gen_module_id_file"), "");

  auto script = [&](const std::vector<std::string>& steps) {
    std::string s = "set -e\n";
    for (const auto& e : env) s += e + "\n";
    for (const auto& c : steps) s += c + "\n";
    return s;
  };
  NvccPhases p;
  p.host_script = script({cmds[0], cudafe});
  std::vector<std::string> device = {cmds[2], cmds[3], cmds[4], cmds[5]};
  device.insert(device.end(), device_tail.begin(), device_tail.end());
  p.device_script = script(device);
  p.final_script = script({cmds[6]});
  return p;
}

}  // namespace mc::eval

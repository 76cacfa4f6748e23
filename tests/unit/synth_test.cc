// Data synthesis: op library, generator, weights files, the built-in teacher's sources (real
// nvcc compiles), decontamination on planted copies, the validity probe on planted invalid
// programs (CPU judge), and the LLM teacher against a real OpenAI-compatible server on loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <mutex>
#include <set>
#include <thread>

#include <httplib.h>

#include "common/fs.h"
#include "common/subprocess.h"
#include "eval/evaluator.h"
#include "eval/problem.h"
#include "eval/toolchain.h"
#include "llm/openai_client.h"
#include "synth/decontaminate.h"
#include "synth/generator.h"
#include "synth/llm_teacher.h"
#include "synth/python_emitter.h"
#include "synth/problem_names.h"
#include "synth/prompt.h"
#include "synth/synthesizer.h"
#include "synth/task_set.h"
#include "synth/dim.h"
#include "synth/teacher.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace mc::synth;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::path(mc::test::test_cache_dir()) / "synth" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

Graph only_op(const std::string& name, uint64_t index, int64_t max_elems = int64_t{1} << 16) {
  GeneratorOptions o;
  for (const auto& [n, _] : op_library()) o.op_weight[n] = n == name ? 1 : 0;
  o.min_elems = 1 << 12;
  o.max_elems = max_elems;
  return Generator(o, 11).make(1, index);
}

mc::eval::EvaluatorOptions cpu_evaluator(const std::string& name) {
  mc::eval::EvaluatorOptions o;
  o.device = "cpu";
  o.cache_dir = mc::test::test_cache_dir();
  o.scratch_dir = scratch(name + "-scratch").string();
  o.sandbox_exe = MUSACODER_BINARY;
  o.progress = false;
  o.compile_workers = 2;
  return o;
}

}  // namespace

TEST(OpLibrary, CoversKernelBenchFamilies) {
  std::set<std::string> fam;
  for (const auto& f : op_families()) fam.insert(f);
  for (const char* f : {"activation", "elementwise", "reduction", "scan", "norm", "softmax", "matmul", "conv", "pool",
                        "loss", "index", "attention"})
    EXPECT_TRUE(fam.count(f)) << f;
  int level1 = 0, anchors = 0;
  for (const auto& [name, d] : op_library()) {
    level1 += static_cast<bool>(d.fresh);
    anchors += d.anchor;
  }
  EXPECT_GE(level1, 70);
  EXPECT_GE(anchors, 5);
  EXPECT_THROW(op("NoSuchOp"), mc::Error);
}

TEST(Generator, SameSeedSameProblemsOtherSeedOthers) {
  Generator a({}, 5), b({}, 5), c({}, 6);
  int differ = 0;
  for (int level = 1; level <= 3; ++level)
    for (uint64_t i = 0; i < 10; ++i) {
      std::string x = problem_source(a.make(level, i), "d"), y = problem_source(b.make(level, i), "d");
      EXPECT_EQ(x, y);
      differ += x != problem_source(c.make(level, i), "d");
    }
  EXPECT_GE(differ, 25);
}

TEST(Generator, LevelsHaveTheirShape) {
  Generator g({}, 3);
  for (uint64_t i = 0; i < 40; ++i) {
    Graph l1 = g.make(1, i), l2 = g.make(2, i), l3 = g.make(3, i);
    EXPECT_EQ(compute_ops(l1), 1) << l1.title();
    EXPECT_TRUE(op(l2.nodes[0].op).anchor) << l2.title();
    EXPECT_GE(compute_ops(l2), 2) << l2.title();
    EXPECT_LE(compute_ops(l2), 6) << l2.title();
    EXPECT_GE(compute_ops(l3), 4) << l3.title();
    EXPECT_LT(difficulty(l1), difficulty(l3) + 1);
  }
}

TEST(Generator, WeightsFileSteersAndBadFilesAreNamed) {
  fs::path dir = scratch("weights");
  mc::write_file_atomic(dir / "w.toml", "max_elems = 65536\n[families]\nconv = 0.0\npool = 0.0\n[ops]\nReLU = 50.0\n");
  GeneratorOptions o = load_generator_options((dir / "w.toml").string());
  EXPECT_EQ(o.max_elems, 65536);
  Generator g(o, 1);
  int relu = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    Graph x = g.make(1, i);
    EXPECT_NE(op(x.nodes[0].op).family, "conv");
    EXPECT_NE(op(x.nodes[0].op).family, "pool");
    relu += x.nodes[0].op == "ReLU";
  }
  EXPECT_GE(relu, 10);
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    mc::write_file_atomic(dir / "bad.toml", text);
    try {
      load_generator_options((dir / "bad.toml").string());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const mc::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("[families]\nconvolution = 1.0\n", "unknown family 'convolution'");
  expect_error("[ops]\nConv9d = 1.0\n", "unknown op 'Conv9d'");
  expect_error("[families]\nconv = -1\n", "must be a number >= 0");
  expect_error("speed = 3\n", "unknown key 'speed'");
  expect_error("[families\n", "bad.toml");
  expect_error("min_elems = 100000\nmax_elems = 1000\n", "min_elems is larger");
}

// Every op's teacher lowering compiles with nvcc (native format), and so do fused level-2 and
// level-3 graphs. Compiles run two at a time.
TEST(Teacher, NativeSourcesCompileWithNvccForEveryOp) {
  auto tc = mc::eval::discover_toolchain("90");
  fs::path dir = scratch("teacher-nvcc");
  std::vector<std::pair<std::string, std::string>> sources;  // (label, source)
  for (const auto& [name, d] : op_library())
    if (d.fresh) sources.push_back({name, lower_graph(only_op(name, 0), "t").native_cu});
  Generator g({}, 21);
  for (int level = 2; level <= 3; ++level)
    for (uint64_t i = 0; i < 6; ++i) {
      Graph x = g.make(level, i);
      sources.push_back({"L" + std::to_string(level) + "_" + x.title(), lower_graph(x, "t").native_cu});
    }
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < sources.size();) {
      fs::path cu = dir / (std::to_string(i) + ".cu");
      mc::write_file_atomic(cu, sources[i].second);
      mc::SubprocessOptions so;
      so.argv = {tc.nvcc, "-c", "-O1", "-std=c++17", "-arch=sm_90", "-I" + tc.include_dir, cu.string(), "-o",
                 (dir / (std::to_string(i) + ".o")).string()};
      auto r = mc::run_command(so, 300000);
      if (!r.status.ok()) {
        std::lock_guard lk(mu);
        failures.push_back(sources[i].first + ": " + r.err.substr(0, 1500));
      }
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed; first: " << (failures.empty() ? "" : failures[0]);
  EXPECT_GE(sources.size(), 80u);
}

// A teacher source carries the device helpers its kernels call and those helpers' own, no others
// (they are most of a solution's tokens otherwise). NativeSourcesCompileWithNvccForEveryOp
// compiles every op's source, so a helper left out fails there.
TEST(Teacher, SourcesCarryOnlyTheHelpersTheyCall) {
  auto helpers = [](const std::string& op) {
    std::string src = lower_graph(only_op(op, 0), "t").native_cu;
    std::set<std::string> got;
    for (const char* h : {"McSum", "McMax", "McMin", "McProd", "mc_warp_reduce", "mc_block_reduce", "mc_block_sum",
                          "mc_block_max", "mc_block_arg", "mc_block_scan"})
      if (src.find(std::string(h) + " ") != std::string::npos || src.find(std::string(h) + "(") != std::string::npos)
        got.insert(h);
    return got;
  };
  EXPECT_EQ(helpers("ReLU"), std::set<std::string>{});
  EXPECT_EQ(helpers("Sum"), (std::set<std::string>{"McSum", "mc_warp_reduce", "mc_block_reduce"}));
  EXPECT_EQ(helpers("ArgMax"), std::set<std::string>{"mc_block_arg"});
  EXPECT_EQ(helpers("CumProd"), (std::set<std::string>{"McProd", "mc_block_scan"}));
  EXPECT_EQ(helpers("Softmax"), (std::set<std::string>{"McSum", "McMax", "mc_warp_reduce", "mc_block_reduce",
                                                       "mc_block_sum", "mc_block_max"}));
  std::string relu = lower_graph(only_op("ReLU", 0), "t").native_cu;
  EXPECT_NE(relu.find("#include <cuda_runtime.h>"), std::string::npos);
  EXPECT_NE(relu.find("#include <math.h>"), std::string::npos);
}

namespace {

// Evaluates the C++ integer expressions dim.h writes (names, NNLL literals, + - * / %, parentheses)
// as C++ does, names from `env`.
int64_t eval_expr(const std::string& s, const std::map<std::string, int64_t>& env) {
  size_t i = 0;
  auto skip = [&] { while (i < s.size() && s[i] == ' ') ++i; };
  std::function<int64_t()> sum, atom;
  atom = [&]() -> int64_t {
    skip();
    if (s[i] == '-') {
      ++i;
      return -atom();
    }
    if (s[i] == '(') {
      ++i;
      int64_t v = sum();
      skip();
      EXPECT_EQ(s[i], ')') << s;
      ++i;
      return v;
    }
    size_t j = i;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
    std::string tok = s.substr(i, j - i);
    i = j;
    if (std::isdigit(static_cast<unsigned char>(tok[0]))) return std::stoll(tok);
    EXPECT_TRUE(env.count(tok)) << tok << " in " << s;
    return env.count(tok) ? env.at(tok) : 0;
  };
  auto product = [&]() -> int64_t {
    int64_t v = atom();
    for (skip(); i < s.size() && (s[i] == '*' || s[i] == '/' || s[i] == '%'); skip()) {
      char op = s[i++];
      int64_t w = atom();
      v = op == '*' ? v * w : op == '/' ? v / w : v % w;
    }
    return v;
  };
  sum = [&]() -> int64_t {
    int64_t v = product();
    for (skip(); i < s.size() && (s[i] == '+' || s[i] == '-'); skip()) {
      char op = s[i++];
      int64_t w = product();
      v = op == '+' ? v + w : v - w;
    }
    return v;
  };
  int64_t v = sum();
  EXPECT_EQ(i, s.size()) << s;
  return v;
}

}  // namespace

// Random arithmetic over named sizes and literals: every expression, as an operand (str) and on
// its own (bare), evaluates in C++ to the value Dim carries.
TEST(Dim, ExpressionsEvaluateToTheirValues) {
  std::mt19937_64 rng(5);
  std::map<std::string, int64_t> env = {{"A", 7}, {"B", 12}, {"C", 3}, {"D", 40}};
  std::vector<Dim> pool;
  for (auto& [n, v] : env) pool.push_back(Dim::named(v, n));
  for (int64_t v : {1, 2, 5, -3}) pool.push_back(Dim(v));
  for (int step = 0; step < 4000; ++step) {
    const Dim& a = pool[rng() % pool.size()];
    const Dim& b = pool[rng() % pool.size()];
    Dim r;
    switch (rng() % 5) {
      case 0: r = a * b; break;
      case 1: r = a + b; break;
      case 2: r = a - b; break;
      case 3: if (b.v() == 0) continue; r = a / b; break;
      default: if (b.v() == 0) continue; r = a % b; break;
    }
    if (std::llabs(r.v()) > (int64_t{1} << 40)) continue;
    ASSERT_EQ(eval_expr(r.str(), env), r.v()) << r.str();
    ASSERT_EQ(eval_expr(r.bare(), env), r.v()) << r.bare();
    ASSERT_EQ(eval_expr("2 * " + r.str() + " % 7", env), 2 * r.v() % 7) << r.str();
    if (pool.size() < 400) pool.push_back(r);
  }
  EXPECT_EQ((Dim::named(9, "X0_2") + Dim(-3) + Dim(1)).bare(), "X0_2 - 2LL");  // offsets fold
  EXPECT_EQ((Dim::named(9, "A") * Dim(1)).bare(), "A");
}

namespace {

// The same graph at other sizes: every size v > 1 becomes v + 32 (one to one, so equal sizes
// stay equal; divisibility by the groups the ops use is kept).
std::optional<Graph> resized(const Graph& g) {
  Graph r;
  r.level = g.level;
  for (auto in : g.inputs) {
    for (auto& d : in.type.shape) d = d > 1 ? d + 32 : d;
    r.add_input(in);
  }
  try {
    for (const Node& n : g.nodes) r.add_node({n.op, n.args, n.p});
  } catch (const mc::Error&) {
    // A parameter tied to the old sizes: a reshape's target, or a residual block whose module
    // arguments repeat the input's channels.
    return std::nullopt;
  }
  r.output = g.output;
  return r;
}

std::string without_constants(const std::string& src) {
  std::string out, line;
  std::istringstream in(src);
  while (std::getline(in, line))
    if (line.rfind("constexpr long long ", 0) != 0) out += line + "\n";
  return out;
}

}  // namespace

// A teacher solution spells its sizes through the constants block at its top: the same problem at
// other sizes gets the same source but for that block (and, in the KernelBench format, the module
// arguments ModelNew repeats from the problem), and the block names each input's dims in order.
TEST(Teacher, SolutionsDifferOnlyInTheirSizesBlock) {
  std::vector<Graph> graphs;
  for (const auto& [name, d] : op_library())
    if (d.fresh) graphs.push_back(only_op(name, 0));
  size_t single = graphs.size();
  Generator gen({}, 21);
  for (int level = 2; level <= 3; ++level)
    for (uint64_t i = 0; i < 12; ++i) graphs.push_back(gen.make(level, i));
  size_t compared = 0;
  for (size_t i = 0; i < graphs.size(); ++i) {
    const Graph& g = graphs[i];
    auto r = resized(g);
    EXPECT_TRUE(r || i >= single) << g.title();  // every single op takes any size
    if (!r) continue;
    ++compared;
    TeacherSolution a = lower_graph(g, "t"), b = lower_graph(*r, "t");
    EXPECT_NE(a.native_cu, b.native_cu) << g.title();
    EXPECT_EQ(without_constants(a.native_cu), without_constants(b.native_cu)) << g.title();
    // ModelNew's constructor repeats the problem's module arguments (nn.Conv2d(64, 128, 3)).
    auto cuda_part = [](const std::string& py) { return without_constants(py.substr(0, py.find("class ModelNew"))); };
    EXPECT_EQ(cuda_part(a.kernelbench_py), cuda_part(b.kernelbench_py)) << g.title();
  }
  EXPECT_GE(compared, single + 12);

  Graph g;
  int x = add_float_input(g, {31, 472, 32});
  g.add_node({"Mean", {x}, {{"dim", 0}, {"keepdim", false}}});
  g.output = g.nodes.back().out;
  std::string src = lower_graph(g, "t").native_cu;
  EXPECT_NE(src.find("constexpr long long X0_0 = 31, X0_1 = 472, X0_2 = 32;\n"), std::string::npos) << src;
  EXPECT_EQ(src.find("15104"), std::string::npos) << src;  // 472 * 32, spelled X0_1 * X0_2
}

// KernelBench's problems give their sizes as module globals (batch_size = 16) that get_inputs()
// uses; ours do too, under the names the teacher's constants block gives the same values. A
// model trained on problems with literal sizes wrote `constexpr long long X_0 = batch_size` on
// KernelBench: it had never seen a named size become a number.
TEST(Generator, ProblemsNameTheirSizesAsTheTeachersConstantsDo) {
  Graph g;
  int x = add_float_input(g, {31, 472, 32});
  g.add_node({"Mean", {x}, {{"dim", 0}, {"keepdim", false}}});
  g.output = g.nodes.back().out;
  std::string py = problem_source(g, "d");
  EXPECT_NE(py.find("\nX0_0 = 31\nX0_1 = 472\nX0_2 = 32\n\n\ndef get_inputs():\n    return [torch.rand(X0_0, X0_1, X0_2)]"),
            std::string::npos) << py;
  EXPECT_NE(lower_graph(g, "t").kernelbench_py.find("constexpr long long X0_0 = 31, X0_1 = 472, X0_2 = 32;"),
            std::string::npos);
  // Generated problems of every level name theirs.
  Generator gen({}, 4);
  for (int level = 1; level <= 3; ++level)
    for (uint64_t i = 0; i < 5; ++i) {
      Graph h = gen.make(level, i);
      std::string src = problem_source(h, "d");
      for (size_t k = 0; k < h.inputs[0].type.shape.size(); ++k)
        if (!input_dim_name(h.inputs[0], k).empty())
          EXPECT_NE(src.find("\n" + input_dim_name(h.inputs[0], k) + " = "), std::string::npos) << src;
    }
}

// The names are KernelBench's (batch_size, in_channels, M, K, N; out_channels, kernel_size as
// constructor arguments): 50 of the 89 compile errors of a model fine-tuned on X0_1-style names
// were KernelBench's names used in CUDA undefined, because its training had never shown
// `in_channels = 3` in a problem become a constant in a solution.
TEST(Generator, ProblemsUseKernelBenchsSizeNames) {
  auto problem = [](const std::string& op) { return problem_source(only_op(op, 0), "d"); };
  auto solution = [](const std::string& op) { return lower_graph(only_op(op, 0), "t").kernelbench_py; };
  auto count = [](const std::string& s, const std::string& x) {
    size_t n = 0;
    for (size_t p = s.find(x); p != std::string::npos; p = s.find(x, p + 1)) ++n;
    return n;
  };
  EXPECT_NE(problem("Conv2d").find("torch.rand(batch_size, in_channels, height, width)"), std::string::npos) << problem("Conv2d");
  EXPECT_NE(solution("Conv2d").find("constexpr long long batch_size = "), std::string::npos) << solution("Conv2d");
  EXPECT_NE(problem("Conv1d").find("torch.rand(batch_size, in_channels, length)"), std::string::npos);
  EXPECT_NE(problem("MaxPool3d").find("torch.rand(batch_size, channels, depth, height, width)"), std::string::npos);
  // A product's operands share K: one global, one constant.
  std::string mm = problem("Matmul");
  EXPECT_NE(mm.find("return [torch.rand(M, K), torch.rand(K, N)]"), std::string::npos) << mm;
  EXPECT_EQ(count(mm, "\nK = "), 1u) << mm;
  EXPECT_EQ(count(solution("Matmul"), " K = "), 1u) << solution("Matmul");
  EXPECT_NE(problem("MatmulTransA").find("torch.rand(K, M), torch.rand(K, N)"), std::string::npos);
  EXPECT_NE(problem("MatmulTransB").find("torch.rand(M, K), torch.rand(N, K)"), std::string::npos);
  EXPECT_NE(problem("MatVec").find("torch.rand(K, 1)"), std::string::npos) << problem("MatVec");  // sizes of 1 stay literals
  EXPECT_NE(problem("MSELoss").find("torch.rand(batch_size, dim), torch.rand(batch_size, dim)"), std::string::npos)
      << problem("MSELoss");
  EXPECT_NE(problem("CrossEntropyLoss").find("(batch_size,))"), std::string::npos) << problem("CrossEntropyLoss");
  // Module arguments: globals too, passed to Model's constructor by get_init_inputs(), and
  // ModelNew takes the same; the solution's constants repeat them.
  Graph conv;
  int cx = add_float_input(conv, {4, 3, 32, 32});
  conv.add_node({"Conv2d", {cx}, {{"out", 16}, {"k", 3}, {"stride", 2}, {"pad", 1}, {"bias", true}}});
  conv.output = conv.nodes.back().out;
  name_problem(conv);
  std::string cp = problem_source(conv, "d"), cs = lower_graph(conv, "t").kernelbench_py;
  const std::string args = "in_channels, out_channels, kernel_size, stride, padding";
  EXPECT_NE(cp.find("def __init__(self, " + args + ", bias=False):"), std::string::npos) << cp;
  EXPECT_NE(cp.find("nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)"),
            std::string::npos) << cp;
  EXPECT_NE(cp.find("\nkernel_size = 3\nstride = 2\npadding = 1\nbias = True\n"), std::string::npos) << cp;
  EXPECT_NE(cp.find("def get_init_inputs():\n    return [" + args + ", bias]"), std::string::npos) << cp;
  EXPECT_NE(cs.find("def __init__(self, " + args + ", bias=False):"), std::string::npos) << cs;
  EXPECT_NE(cs.find("constexpr long long out_channels = "), std::string::npos) << cs;
  EXPECT_NE(cs.find(", kernel_size = 3, stride = 2, padding = 1;"), std::string::npos) << cs;
  // Without a bias, as KernelBench's convolutions mostly are: the default, not passed.
  conv.nodes[0].p["bias"] = false;
  std::string nb = problem_source(conv, "d");
  EXPECT_NE(nb.find("def get_init_inputs():\n    return [" + args + "]"), std::string::npos) << nb;
  EXPECT_EQ(nb.find("bias = "), std::string::npos) << nb;
  EXPECT_NE(problem("MaxPool2d").find("nn.MaxPool2d(kernel_size=kernel_size, stride="), std::string::npos)
      << problem("MaxPool2d");
  EXPECT_NE(problem("Linear").find("nn.Linear(in_features, out_features"), std::string::npos) << problem("Linear");
  // Every name is defined once, and none is CUDA's dim3.
  Generator gen({}, 5);
  for (int level = 1; level <= 3; ++level)
    for (uint64_t i = 0; i < 30; ++i) {
      Graph h = gen.make(level, i);
      std::string py = problem_source(h, "d");
      EXPECT_EQ(py.find("dim3"), std::string::npos) << py;
      std::set<std::string> names;
      for (auto& in : h.inputs)
        for (size_t k = 0; k < in.type.shape.size(); ++k)
          if (!input_dim_name(in, k).empty()) names.insert(input_dim_name(in, k));
      for (auto& n : names) EXPECT_EQ(count(py, "\n" + n + " = "), 1u) << n << "\n" << py;
    }
}

TEST(Teacher, KernelBenchSolutionPassesStaticLegalityAndFusesEpilogues) {
  GeneratorOptions o;
  Graph g;
  int x = add_float_input(g, {64, 128});
  int h = g.add_node({"Linear", {x}, {{"out", 256}, {"bias", true}}});
  h = g.add_node({"ReLU", {h}, nlohmann::json::object()});
  h = g.add_node({"Scale", {h}, {{"c", 0.5}}});
  g.add_node({"Softmax", {h}, {{"dim", 1}}});
  g.level = 2;
  TeacherSolution s = lower_graph(g, "mc_teacher_test");
  EXPECT_EQ(s.kernels, 2);    // GEMM (+ReLU, Scale in its epilogue), softmax
  EXPECT_EQ(s.fused_ops, 2);
  EXPECT_NE(s.kernelbench_py.find("class ModelNew"), std::string::npos);
  EXPECT_NE(s.kernelbench_py.find("self.linear0.weight"), std::string::npos);
  fs::path dir = scratch("teacher-kb");
  mc::write_file_atomic(dir / "sol.py", s.kernelbench_py);
  mc::SubprocessOptions so;
  so.argv = {MUSACODER_BINARY, "check", (dir / "sol.py").string()};
  auto r = mc::run_command(so, 60000);
  EXPECT_EQ(r.status.exit_code, 0) << r.out << r.err;
}

TEST(Decontamination, CatchesPlantedCopiesAndRenamedNearCopies) {
  auto tc = mc::eval::discover_toolchain("90");
  std::vector<std::string> bench, cands;
  for (const auto& f : mc::test::case_files("synth/bench")) bench.push_back(f);
  for (const auto& f : mc::test::case_files("synth/candidates")) cands.push_back(f);
  Decontaminator dc(trace_problems(bench, tc.python, tc.harness_dir));
  EXPECT_EQ(dc.untraced(), 0u);
  auto traces = trace_problems(cands, tc.python, tc.harness_dir);
  for (size_t i = 0; i < cands.size(); ++i) {
    ASSERT_TRUE(traces[i].traced) << cands[i] << ": " << traces[i].error;
    std::string want = mc::test::case_header(cands[i], "expect");
    int ops = want.find("Conv2d") != std::string::npos || cands[i].find("chain") != std::string::npos ? 3 : 1;
    auto c = dc.check(traces[i], ops);
    if (want == "clean") {
      EXPECT_FALSE(c.has_value()) << cands[i] << " flagged: " << (c ? c->rule + " " + c->benchmark : "");
    } else {
      ASSERT_TRUE(c.has_value()) << cands[i] << " not caught";
      EXPECT_EQ(c->rule, want.substr(0, want.find(' '))) << cands[i] << ": " << c->detail;
      EXPECT_NE(c->benchmark.find(want.substr(want.find(' ') + 1)), std::string::npos) << c->benchmark;
    }
  }
}

TEST(Decontamination, UntraceableFilesFallBackToSource) {
  std::string a = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x).sum() + helper(x)\n";
  std::string b = "class Model(nn.Module):\n    def forward(self, y):\n        return torch.relu(y).sum() + other(y)\n";
  ProblemTrace ta, tb;
  ta.tokens = source_tokens(a), tb.tokens = source_tokens(b);
  ta.path = "a.py", tb.path = "b.py";
  EXPECT_EQ(ta.tokens, tb.tokens);  // identifiers normalized
  Decontaminator dc({tb});
  auto c = dc.check(ta, 1);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->rule, "near_source");
}

// The prompts ask for the run's backend: a folder's are built for it, and a synth row made for
// another backend (its prompt asks for other kernels) is refused with the row and the way out.
TEST(TaskSet, PromptsFollowTheBackendAndRowsOfAnotherAreRefused) {
  fs::path dir = scratch("task-set");
  fs::create_directories(dir / "level1");
  fs::copy_file(mc::test::cases_dir() + "/problems/1_Add.py", dir / "level1" / "1_Add.py");
  auto cuda = load_tasks(dir.string(), "kernelbench", 0, "cuda");
  auto musa = load_tasks(dir.string(), "kernelbench", 0, "musa");
  ASSERT_EQ(cuda.size(), 1u);
  ASSERT_EQ(musa.size(), 1u);
  EXPECT_EQ(cuda[0].prompt, task_prompt(cuda[0].problem->source, "kernelbench", "cuda"));
  EXPECT_EQ(musa[0].prompt, task_prompt(musa[0].problem->source, "kernelbench", "musa"));
  EXPECT_NE(cuda[0].prompt, musa[0].prompt);

  // Rows without "backend" predate it and were made for CUDA.
  mc::write_file_atomic(dir / "problems.jsonl",
                        "{\"path\": \"level1/1_Add.py\", \"level\": 1, \"prompts\": {\"native\": \"old\"}}\n"
                        "{\"path\": \"level1/1_Add.py\", \"level\": 2, \"backend\": \"musa\", "
                        "\"prompts\": {\"native\": \"for musa\"}}\n");
  auto rows = load_tasks((dir / "problems.jsonl").string(), "native", 1, "cuda");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].prompt, "old");
  EXPECT_EQ(load_tasks((dir / "problems.jsonl").string(), "native", 2, "musa")[0].prompt, "for musa");
  try {
    load_tasks((dir / "problems.jsonl").string(), "native", 2, "cuda");
    FAIL() << "a musa row was loaded for a cuda run";
  } catch (const mc::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("problems.jsonl:2"), std::string::npos) << m;
    EXPECT_NE(m.find("synthesized for musa"), std::string::npos) << m;
    EXPECT_NE(m.find("--backend musa"), std::string::npos) << m;
  }
  EXPECT_THROW(load_tasks(dir.string(), "native", 0, "rocm"), mc::Error);
}

// The validity probe (the judge's reference execution, here on the CPU) rejects each planted
// invalid program with its reason and keeps the valid one. Untimed, three judges probe at once
// (MUSACODER_COMPILE_WORKERS=3), each answer landing on its own problem.
TEST(Validity, ProbeRejectsPlantedInvalidPrograms) {
  setenv("MUSACODER_COMPILE_WORKERS", "3", 1);
  std::vector<mc::eval::ProblemPtr> probs;
  std::vector<std::string> want;
  for (const auto& f : mc::test::case_files("synth/planted")) {
    probs.push_back(mc::eval::load_problem(f));
    want.push_back(mc::test::case_header(f, "expect"));
  }
  mc::eval::EvalConfig cfg;
  cfg.timing = false;
  mc::eval::Evaluator ev(cfg, cpu_evaluator("probe"));
  size_t called = 0;
  auto res = ev.probe(probs, 0.1, [&](size_t) { ++called; });
  unsetenv("MUSACODER_COMPILE_WORKERS");
  EXPECT_EQ(called, probs.size());
  SynthOptions so;
  for (size_t i = 0; i < probs.size(); ++i) {
    std::string stage, why = invalid_reason(res[i], so, &stage);
    if (want[i] == "valid") {
      EXPECT_EQ(why, "") << probs[i]->path << " " << res[i].dump();
    } else {
      EXPECT_EQ(stage, "validity") << probs[i]->path;
      EXPECT_NE(why.find(want[i]), std::string::npos) << probs[i]->path << ": got '" << why << "' " << res[i].dump().substr(0, 600);
    }
  }
  std::string stage;
  EXPECT_NE(invalid_reason({{"infra_error", "judge died"}}, so, &stage), "");
  EXPECT_EQ(stage, "infra");
}

// ---- OpenAI-compatible client and the LLM teacher, against a real server on loopback -------
namespace {

struct FakeEndpoint {
  httplib::Server srv;
  std::thread th;
  int port = 0;
  std::atomic<int> hits{0}, in_flight{0}, max_in_flight{0};
  std::function<void(const httplib::Request&, httplib::Response&)> handler;

  FakeEndpoint() {
    auto wrap = [this](const httplib::Request& q, httplib::Response& r) {
      ++hits;
      int now = ++in_flight;
      for (int m = max_in_flight.load(); now > m && !max_in_flight.compare_exchange_weak(m, now);) {
      }
      handler(q, r);
      --in_flight;
    };
    srv.Post("/v1/chat/completions", wrap);
    srv.Post("/v1/completions", wrap);
    port = srv.bind_to_any_port("127.0.0.1");
    th = std::thread([this] { srv.listen_after_bind(); });
    while (!srv.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~FakeEndpoint() {
    srv.stop();
    th.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

std::string chat_reply(const std::vector<std::string>& texts) {
  nlohmann::json j = {{"id", "x"}, {"object", "chat.completion"}};
  for (size_t i = 0; i < texts.size(); ++i)
    j["choices"].push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", texts[i]}}}, {"finish_reason", "stop"}});
  return j.dump();
}

}  // namespace

TEST(OpenAIClient, RetriesTransientFailuresOnlyAndBoundsConcurrency) {
  FakeEndpoint ep;
  std::atomic<int> calls{0};
  ep.handler = [&](const httplib::Request& q, httplib::Response& r) {
    auto body = nlohmann::json::parse(q.body);
    std::string user = body["messages"][0]["content"];
    if (user == "flaky" && ++calls <= 2) {
      r.status = 503;
      r.set_header("Retry-After", "0");
      return;
    }
    if (user == "bad") {
      r.status = 400;
      r.set_content(R"({"error": "bad request"})", "application/json");
      return;
    }
    if (user == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(150));
    r.set_content(chat_reply({"answer to " + user}), "application/json");
  };
  mc::llm::OpenAIClientOptions o;
  o.base_url = ep.url();
  o.concurrency = 2;
  o.backoff_s = 0.01;
  mc::llm::OpenAIClient c(o);
  auto r = c.chat("m", {{"user", "flaky"}}, {});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].text, "answer to flaky");
  EXPECT_EQ(ep.hits.load(), 3);
  int before = ep.hits.load();
  EXPECT_THROW(c.chat("m", {{"user", "bad"}}, {}), mc::llm::RequestError);
  EXPECT_EQ(ep.hits.load(), before + 1);  // a 4xx is not retried
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) ts.emplace_back([&] { c.chat("m", {{"user", "slow"}}, {}); });
  for (auto& t : ts) t.join();
  EXPECT_LE(ep.max_in_flight.load(), 2);
  o.base_url = "ftp://x";
  EXPECT_THROW(mc::llm::OpenAIClient{o}, mc::Error);
  o.base_url = "http://127.0.0.1:1";  // nothing listens
  o.max_retries = 1;
  mc::llm::OpenAIClient dead(o);
  EXPECT_THROW(dead.chat("m", {{"user", "x"}}, {}), mc::Error);
}

// First answers do not compile; the repair turn (with MooreEval's feedback in the prompt)
// returns a working kernel: one verified answer, kept with its two-turn trace.
TEST(LlmTeacher, RejectionSamplingAndRepairTraces) {
  Graph g = only_op("ReLU", 0);
  fs::path dir = scratch("llm-teacher");
  mc::write_file_atomic(dir / "1_ReLU.py", problem_source(g, "ReLU"));
  auto problem = mc::eval::load_problem((dir / "1_ReLU.py").string(), 1);
  std::string good = lower_graph(g, "t").native_cu;
  FakeEndpoint ep;
  std::atomic<bool> saw_feedback{false};
  ep.handler = [&](const httplib::Request& q, httplib::Response& r) {
    auto body = nlohmann::json::parse(q.body);
    const auto& msgs = body["messages"];
    if (msgs.size() == 1) {
      int n = body.value("n", 1);
      std::vector<std::string> answers(n, "Here it is:\n```cuda\n#include \"musacoder/native_abi.h\"\nextern \"C\" int mc_forward(const mc_tensor* i, int n, mc_tensor* o, int m, cudaStream_t s) { return oops; }\n```\n");
      r.set_content(chat_reply(answers), "application/json");
    } else {
      std::string fb = msgs[msgs.size() - 1]["content"];
      if (fb.find("oops") != std::string::npos) saw_feedback = true;
      r.set_content(chat_reply({"Fixed:\n```cuda\n" + good + "```\n"}), "application/json");
    }
  };
  mc::eval::EvalConfig cfg;
  cfg.compile_only = true;  // no GPU here: verified = compiled
  mc::eval::Evaluator ev(cfg, cpu_evaluator("llm"));
  LlmTeacherOptions lo;
  lo.client.base_url = ep.url();
  lo.model = "test-model";
  lo.samples = 2;
  lo.repair_turns = 1;
  mc::llm::OpenAIClient client(lo.client);
  LlmTeacherResult r = llm_teach(lo, client, ev, task_prompt(g, problem->source, lo.format), problem);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(saw_feedback.load());
  ASSERT_GE(r.verified.size(), 1u);
  EXPECT_EQ(r.verified[0]["turns"], 2);
  EXPECT_EQ(r.verified[0]["messages"].size(), 4u);  // task, failed answer, feedback, repair
  EXPECT_EQ(r.attempts.size(), 4u);                 // 2 first answers + 2 repairs
  EXPECT_EQ(r.attempts[0]["verdict"], "compile_error");
}

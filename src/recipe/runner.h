// `musacoder recipe`: a training recipe as data. A TOML file lists stages in order; each stage
// is one or more commands of this project (synth, corpus, the tokenizer trainer, init, train
// sft, rft, train rl, bench-model, plot), written as argument arrays with placeholders:
//
//   {run}            the run folder (every artifact lives under it)
//   {bin}            this musacoder; {model_bin} the musacoder-model beside it
//   {root}           the project tree (MUSACODER_HOME), {python} the interpreter
//                    ($MUSACODER_PYTHON, else python3)
//   {recipe}         the folder of the recipe file
//   {var.NAME}       a [vars] value (a recipe's sizes and seeds; --set NAME=VALUE overrides).
//                    A var that is an array of strings is a list of arguments: an argument
//                    that is exactly {var.NAME} becomes its elements, each expanded in turn
//                    (an element that names another list var becomes its elements)
//                    (the options several stages share, written once); --set NAME="A B" sets
//                    it to the words of its value. Inside a longer argument it is an error.
//   {last:DIR}       DIR's newest checkpoint (DIR/checkpoints/step-N); an error if it has none
//   {resume:DIR}     "--resume" when DIR has a checkpoint, else the argument is dropped
//
// Stages next to each other that name the same `together` group run at once, each its own
// commands in order (the paper's ablation arms: same start, same budget, side by side, so each
// has the same conditions and the group takes the time of its slowest arm). On a machine with
// several GPUs they are spread over them, one each in turn (RunOptions::gpus);
// `together_per_gpu = N` runs them in waves of N per GPU, each wave after the one before has
// ended (arms that do not fit beside each other run one after another on one GPU, all at once on
// as many); every stage of the group names the same N (a recipe where they differ is refused).
// One failing does not stop the others; the group then fails, naming it.
//
// A stage that finished is recorded in RUN/recipe/state.json and skipped when the recipe runs
// again, so a recipe runs across many short slices of GPU time; a stage that stopped part way
// is run again, and its own commands resume (train's --resume, rft's reused verdicts, ...).
// A finished stage whose inputs were made again after it (`uses`, stale_reason) is still
// skipped, with a warning that names what changed and the command that remakes it.
// Each stage's output goes to RUN/recipe/<stage>.log; its seconds, and the GPU seconds where a
// GPU was visible, to state.json and RUN/recipe/stages.jsonl.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::recipe {

struct RecipeStage {
  std::string name;
  std::string about;                               // one line, for --list and the summary
  std::vector<std::vector<std::string>> commands;  // run in order, each must exit 0
  std::map<std::string, std::string> env;          // added to every command's environment
  std::string together;                            // run at once with the stages next to it that name it
  // `uses`: earlier stages whose outputs this one reads. Only for warnings: a finished stage
  // that a stage it uses (or one those use) finished after may be stale, and the recipe says so
  // when it skips it or runs a stage that reads it (a corpus made again without CUTLASS
  // once left the tokenizer of the corpus before it, and nothing said so).
  std::vector<std::string> uses;
  int per_gpu = 0;  // together_per_gpu: at most this many of the group on one GPU at once (0: no limit)
  // together_gpu_mib: the GPU memory one of them may hold at its peak, in MiB (0: not said). A
  // group never puts more on a GPU than its memory holds (RunOptions::gpu_mib; fitting_per_gpu).
  int64_t gpu_mib = 0;
};

struct Recipe {
  std::string path;
  std::map<std::string, std::string> vars;
  std::map<std::string, std::vector<std::string>> lists;  // [vars] that are arrays: argument lists
  std::vector<RecipeStage> stages;
};

// Throws mc::Error naming the file and the stage or field that is wrong.
Recipe load_recipe(const std::string& path);

struct RunOptions {
  std::string run_dir;
  std::vector<std::string> only;          // run just these stages (in recipe order); empty: all
  std::string from;                       // start here (earlier stages must have finished)
  std::map<std::string, std::string> set; // --set NAME=VALUE
  bool redo = false;                      // run the selected stages even if they finished
  bool progress = true;
  // GPUs (CUDA's names: an index or a UUID) that the stages of a `together` group are spread
  // over, one each in turn, through CUDA_VISIBLE_DEVICES. Fewer than two: no spreading.
  std::vector<std::string> gpus;
  // Overrides every group's together_per_gpu (0: the recipe's own). E.g. RL and its three
  // arms, one per GPU on a machine with four, two at a time on one GPU with room for two.
  int per_gpu = 0;
  // Each GPU's memory in MiB (the smallest of `gpus`; `recipe --gpu-mib`, default nvidia-smi's;
  // 0: unknown, no cap): a group whose stages say together_gpu_mib runs only as many on a GPU as
  // fit (five RL arms and one arm's evaluation once held 82 GB of one GPU, more than an H100
  // has).
  int64_t gpu_mib = 0;
};

// How many stages that each hold `stage_mib` at their peak run at once on a GPU of `gpu_mib`:
// `asked` (0: no limit), fewer where they would not fit, never less than one. Either size 0
// (unknown): `asked`.
int fitting_per_gpu(int asked, int64_t stage_mib, int64_t gpu_mib);

// The smallest memory among these GPUs (CUDA's names, as nvidia-smi -i takes them), in MiB;
// 0 where nvidia-smi is missing or does not answer.
int64_t gpu_memory_mib(const std::vector<std::string>& gpus);

// The GPUs this machine shows: CUDA_VISIBLE_DEVICES's list where it is set, else one per
// /dev/nvidiaN. The default of `recipe --gpus`.
std::vector<std::string> visible_gpus();

// Expands one argument (placeholders above). With `check_only`, names an unknown or unclosed
// placeholder without looking for checkpoints ({last:} and {resume:} expand to nothing): the
// whole recipe is checked so before its first stage runs. Exposed for tests.
std::string expand(const std::string& arg, const std::map<std::string, std::string>& values, const std::string& run_dir,
                   bool check_only = false);

// One argument of a command as the arguments it becomes: none when it expands to nothing, a
// list var's elements when it is exactly {var.NAME} of one, else one.
std::vector<std::string> expand_arg(const std::string& arg, const std::map<std::string, std::string>& values,
                                    const std::string& run_dir, bool check_only = false);

// Runs the recipe; returns the state (also in RUN/recipe/state.json). Throws mc::Error naming the
// stage, its command and its log when a command fails.
nlohmann::json run_recipe(const Recipe& r, const RunOptions& o);

// Why finished stage `name` may be stale in a run whose state.json "stages" object is `stages`:
// a stage it uses finished after it did, or one it uses is itself stale (followed back through
// `uses`). "" when it is not, or has not finished.
std::string stale_reason(const Recipe& r, const nlohmann::json& stages, const std::string& name);

// The newest checkpoint folder under dir/checkpoints ("" : none).
std::string last_checkpoint(const std::string& dir);

}  // namespace mc::recipe

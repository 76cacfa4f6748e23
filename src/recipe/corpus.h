// The pretraining corpus of the recipe (`musacoder corpus`): code text the machine already has
// or a package installs (the CUDA toolkit's headers, the C++/CUDA headers inside the torch wheel,
// CUTLASS/CuTe, cupy's and triton's sources, ...) and the project's own synthesized problems with
// their verified solutions. Each source is a folder and the file endings to take, with the
// licence it is under. Files are read as text (binary and non-UTF-8 files are skipped), exact
// duplicates (after trailing whitespace) are dropped, and nothing of KernelBench may enter: a
// file equal to a benchmark file, or a Python file that holds a benchmark problem's Model (85%
// of its normalized 5-grams, as synth's decontamination reads sources), is dropped with the
// benchmark file it matches. Out: corpus.jsonl ({"text"} rows, what `train sft` pretrains on,
// with source and path), corpus-eval.jsonl (a held-out share, for the eval loss), report.json and
// report.md (per source: files, bytes, held out, drops, licence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::recipe {

struct CorpusSource {
  std::string name;
  // A folder; "$VAR/..." takes an environment variable, "python:module/sub" the folder of an
  // importable Python module (resolved by the caller with the interpreter, see resolve_source).
  std::string path;
  std::vector<std::string> extensions;  // ".h", ".cuh", ... (empty: every file)
  std::string license;
  int64_t max_files = 0;                // 0: no limit (files are taken in sorted order)
  // A `musacoder synth` dataset.jsonl instead of a folder: each verified row becomes one text
  // (the problem, then its solution).
  bool synth_dataset = false;
  // Skipped, and said so in the report, where the folder or module is absent (a package that
  // one machine has and another has not); otherwise its absence is an error.
  bool optional = false;
};

struct CorpusOptions {
  std::vector<CorpusSource> sources;
  std::string out_dir;
  std::string decontaminate_dir;      // a KernelBench checkout ("" : none)
  int64_t max_file_bytes = 1 << 20;   // larger files are skipped (generated tables, amalgamations)
  double contamination = 0.85;        // share of a benchmark problem's 5-grams that drops a file
  // Files held out for the pretraining's eval loss (corpus-eval.jsonl), chosen by their content
  // hash: the same files for the same corpus.
  double eval_share = 0.01;
  std::string python = "python3";     // resolves python:module paths
  bool progress = true;
};

// Reads [[source]] tables (name, path, extensions, license, max_files, synth_dataset, optional) and the
// top-level max_file_bytes / contamination / eval_share of a TOML file. Throws mc::Error naming the file
// and the field.
CorpusOptions load_corpus_config(const std::string& path);

// The folder a source path names ("$VAR", "python:module", or as is). Throws mc::Error when an
// environment variable is unset or the module cannot be imported.
std::string resolve_source(const std::string& path, const std::string& python);

// Builds the corpus into out_dir and returns the report (also written there).
nlohmann::json build_corpus(const CorpusOptions& o);

}  // namespace mc::recipe

// run.json in a run's folder: what made the run. train sft, train rl, rft and recipe write it
// (bench-model writes its own settings there, which --resume checks). Each invocation of the
// folder, the first and every --resume, is appended:
//   {"format_version": 1, "command": "train sft",
//    "invocations": [{"argv": [...], "options": {"--lr": "1e-05", ...}, "given": ["--lr", ...],
//                     "commit": "<sha of the source tree>" | null, "dirty": bool, "started_at": "..."}]}
// "options" holds every option's value (given, or its default where it shows one); "given" names
// those on the command line. "commit" is the source tree's (MUSACODER_HOME) HEAD when it is a git
// checkout, "dirty" whether tracked files differ from it.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace mc::cli {

// main() records the command line once, before parsing.
void set_command_line(int argc, char** argv);

// Appends this invocation to DIR/run.json (creating DIR; nothing when DIR cannot be made, which
// the command then reports). On rank 0 only when RANK is set.
void write_run_record(const std::string& dir, const std::string& command, const CLI::App& sub);

}  // namespace mc::cli

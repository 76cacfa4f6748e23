// MusaCoder's installation root: the folder that holds python/, include/, docs/ and the data
// tables under src/ ($MUSACODER_HOME, else the source tree this binary was built from).
#pragma once

#include <string>

namespace mc {

std::string musacoder_home();

// The running binary's path (/proc/self/exe; "musacoder" where it cannot be read): the tools
// beside it (musacoder-model, the sandbox) are found from it.
std::string self_exe();

}  // namespace mc

// MusaCoder's installation root: the folder that holds python/, include/, docs/ and the data
// tables under src/ ($MUSACODER_HOME, else the source tree this binary was built from).
#pragma once

#include <string>

namespace mc {

std::string musacoder_home();

}  // namespace mc

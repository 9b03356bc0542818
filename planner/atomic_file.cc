#include "planner/atomic_file.h"

#include <cstdio>
#include <fstream>

#include "planner/user_error.h"

namespace llmplan {

void WriteFileAtomically(const std::string& path, const std::string& contents, const std::string& what) {
  // The temporary sits in the same directory, so rename() replaces the file
  // in one step on the same file system.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw UserError("cannot write " + what + " to '" + path + "'; check the directory exists and is writable");
    out << contents;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw UserError("writing " + what + " to '" + path + "' failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw UserError("cannot move " + what + " into '" + path + "'");
  }
}

}  // namespace llmplan

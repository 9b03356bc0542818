// WriteFileAtomically: a whole file written through a temporary beside it and
// a rename, so a reader (or a crash mid-write) sees the old file or the new
// one, never a torn one. Plans, traces, pictures and reports are written so.
#pragma once

#include <string>

namespace llmplan {

// Writes `contents` to `path`. `what` names the file for the user ("plan",
// "trace", "report").
// Throws UserError when the directory is missing or not writable, or the
// write fails (disk full); the temporary is removed then.
void WriteFileAtomically(const std::string& path, const std::string& contents, const std::string& what);

}  // namespace llmplan

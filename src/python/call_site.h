// Where the user's Python code is, for the stall diagnosis (src/engine/stall_report.h): the
// innermost frame outside perseus, torch and the standard library, as "file:line in function".
// Looked up only for collectives that are already late; nothing here runs per call.
#pragma once

#include <string>

namespace perseus_py {

// The calling thread's site, or "". GIL held.
std::string callerSite();

// Marks the calling thread as in a call into perseus while it lives, for the site finder
// below: a C entry (fast_entries.cc) waits with no frame of perseus's on the thread's Python
// stack, which is how the finder otherwise tells a waiting thread. Two stores per call.
class InPerseusCall {
 public:
  InPerseusCall();
  ~InPerseusCall();
  InPerseusCall(const InPerseusCall&) = delete;
  InPerseusCall& operator=(const InPerseusCall&) = delete;
};

// Registers the engine's site finder (perseus_set_call_site_finder): for a late collective that
// no Handle.wait noted a site for (DDP's reducer waits in C++; a blocking dist.all_reduce waits
// in the core), it names the site of the thread that is inside a call into torch or perseus,
// the main thread first.
void registerSiteFinder();

}  // namespace perseus_py

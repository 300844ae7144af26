// Runs Python completion callbacks off the engine thread: the engine's C callback only queues
// (it must not block, and taking the GIL could), and one dispatcher thread calls Python.
#pragma once

#include <Python.h>

#include "perseus/c_api.h"

namespace perseus_py {

// Called from the engine thread with no GIL: queues fn(status). Steals the reference to fn.
void postCallback(PyObject* fn, int status);
// Stops the dispatcher before the interpreter finalizes (perseus registers it with atexit);
// callbacks that arrive later are dropped. GIL held.
void stopCallbacks();

// The C trampoline given to perseus_set_callback; user_data is an owned PyObject* callable.
extern "C" void perseusCallbackTrampoline(perseus_handle handle, perseus_status status,
                                          void* user_data);

}  // namespace perseus_py

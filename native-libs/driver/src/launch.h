// The hot-path kernel launch, a raw METH_FASTCALL function.
#ifndef PYGPUKIT_LAUNCH_H
#define PYGPUKIT_LAUNCH_H

#include <Python.h>

namespace pgk {

// {"launch", ...} followed by the sentinel; for PyModule_AddFunctions.
extern PyMethodDef launch_methods[];

// The launch gate (pygpukit/launch_gate.h) around a launch on `stream`,
// with the GIL held: gate_enter waits (GIL released) when the scheduler
// says so and returns a token for gate_exit, called after a successful launch.
int gate_enter(unsigned long long stream);
void gate_exit(int token, unsigned long long stream);

}  // namespace pgk

#endif

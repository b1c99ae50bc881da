// The hot-path kernel launch, a raw METH_FASTCALL function.
#ifndef PYGPUKIT_LAUNCH_H
#define PYGPUKIT_LAUNCH_H

#include <Python.h>

namespace pgk {

// {"launch", ...} followed by the sentinel; for PyModule_AddFunctions.
extern PyMethodDef launch_methods[];

}  // namespace pgk

#endif

// The one translation unit that implements heterograd's C API: built as the shared library
// libheterograd_c.so, which C programs link and Python loads with ctypes.
#define HG_C_API_IMPLEMENTATION
#include "heterograd/c/heterograd.h"

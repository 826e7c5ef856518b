/* lua_unity.c: Lua 5.4.8 (its core and libraries: onelua.c with MAKE_LIB) and the observer as one translation
 * unit, so that clang inlines across what would be separate files: the interpreter's small helpers
 * (luaH_getshortstr, luaG_traceexec, the API's index2value ...) and the observer's calls into the API. In
 * the kernel every call left standing is a region transition, which is what a Lua packet's time went on. */
#define MAKE_LIB
#include "onelua.c"

#include "lua_observer.c"

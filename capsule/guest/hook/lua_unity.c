/* lua_unity.c: Lua 5.4.8 (its core and libraries, included in the order of Lua's own onelua.c) and the
 * observer as one translation unit, so that clang inlines across what would be separate files: the
 * interpreter's small helpers (luaH_getshortstr, the API's index2value ...) and the observer's calls into the
 * API. In the kernel every call left standing is a region transition, which is what a Lua packet's time went
 * on. Two more cuts of the same kind, which change no behaviour:
 *
 * - Integers are formatted here rather than by snprintf, whose general machinery (wasi-libc's vfprintf) cost
 *   a packet script about a microsecond per "%d" in the kernel: Lua's one-item l_sprintf takes the plain
 *   integer formats ("%lld", "%lli", "%llu", "%llx", "%llX": string.format's %d %i %u %x %X without flags,
 *   width or precision, tostring, "..") itself, with the same output, and leaves every other format to
 *   snprintf.
 * - The observer's instruction limit is a count hook, and with a hook set the interpreter calls
 *   luaG_traceexec before every instruction. Its common case (a count hook only, the count not yet reached:
 *   save the pc, count down) is inlined into the interpreter's loop here; everything else goes to the real
 *   function.
 */
#include "lprefix.h" /* as onelua.c begins: before the system headers */

#include <stddef.h>
#include <stdio.h>

#define LUA_CORE /* onelua.c's set-up for luaconf.h */
#define LUA_LIB
#define ltable_c
#define lvm_c
#include "luaconf.h"

static int capsule_lua_fmt_int(char *s, size_t size, const char *f, long long v) {
    char c = f[0] == '%' && f[1] == 'l' && f[2] == 'l' && f[3] && !f[4] ? f[3] : 0;
    const char *digits = c == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    unsigned base = c == 'x' || c == 'X' ? 16 : 10;
    if (c != 'd' && c != 'i' && c != 'u' && base != 16)
        return snprintf(s, size, f, v);
    int neg = (c == 'd' || c == 'i') && v < 0;
    unsigned long long u = neg ? 0 - (unsigned long long)v : (unsigned long long)v;
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = digits[u % base];
        u /= base;
    } while (u);
    if (neg)
        tmp[n++] = '-';
    if ((size_t)n >= size) /* never with Lua's buffers; snprintf knows how to truncate */
        return snprintf(s, size, f, v);
    for (int k = 0; k < n; k++)
        s[k] = tmp[n - 1 - k];
    s[n] = 0;
    return n;
}

#undef l_sprintf
#define l_sprintf(s, sz, f, i) _Generic((i), long long: capsule_lua_fmt_int, default: snprintf)(s, sz, f, i)

/* as onelua.c: the internal functions static, so that they can be inlined and dropped */
#undef LUAI_FUNC
#undef LUAI_DDEC
#undef LUAI_DDEF
#define LUAI_FUNC static
#define LUAI_DDEC(def) /* empty */
#define LUAI_DDEF static

#include "lzio.c"
#include "lctype.c"
#include "lopcodes.c"
#include "lmem.c"
#include "lundump.c"
#include "ldump.c"
#include "lstate.c"
#include "lgc.c"
#include "llex.c"
#include "lcode.c"
#include "lparser.c"
#include "ldebug.c"
#include "lfunc.c"
#include "lobject.c"
#include "ltm.c"
#include "lstring.c"
#include "ltable.c"
#include "ldo.c"

/* luaG_traceexec's effect when only a count hook is set and its count is not reached (ldebug.c) */
static inline __attribute__((always_inline)) int capsule_traceexec(lua_State *L, const Instruction *pc) {
    if ((L->hookmask & (LUA_MASKLINE | LUA_MASKCOUNT)) == LUA_MASKCOUNT && L->hookcount > 1) {
        L->ci->u.l.savedpc = pc + 1;
        L->hookcount--;
        return 1;
    }
    return luaG_traceexec(L, pc);
}
#define luaG_traceexec capsule_traceexec
#include "lvm.c"
#undef luaG_traceexec

#include "lapi.c"
#include "lauxlib.c"
#include "lbaselib.c"
#include "lcorolib.c"
#include "ldblib.c"
#include "liolib.c"
#include "lmathlib.c"
#include "loadlib.c"
#include "loslib.c"
#include "lstrlib.c"
#include "ltablib.c"
#include "lutf8lib.c"
#include "linit.c"

#include "lua_observer.c"

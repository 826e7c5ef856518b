/* start.c: the program entry point capsule links instead of wasi-libc's crt1-command.o.
 *
 * wasm-ld wraps every export of a "command" (a module whose _start does not call __wasm_call_ctors itself)
 * in a function that runs the static constructors before and the destructors after it. The host calls
 * capsule_io, capsule_alloc and capsule_fs_add before _start and capsule_fs_list after it, so those
 * wrappers would construct C++ globals twice and flush stdio early. This _start calls the constructors
 * itself, which makes wasm-ld leave the other exports alone.
 */
#include <stdlib.h>

extern void __wasm_call_ctors(void);
extern int __original_main(void);

__attribute__((export_name("_start"))) void _start(void) {
    static int started;
    if (started) /* a second _start would run constructors again over live objects */
        __builtin_trap();
    started = 1;
    __wasm_call_ctors();
    exit(__original_main());
}

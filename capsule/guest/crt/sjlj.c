/* The runtime half of setjmp/longjmp (see ../include/setjmp.h): the symbols clang's emscripten-sjlj lowering
 * expects. Written for capsule; the unwinding itself is the compiler's `capsule.unwind`. */
#include <stdint.h>
#include <setjmp.h>

__attribute__((import_module("capsule"), import_name("unwind"))) _Noreturn void capsule_unwind(void);

/* set by longjmp, read (and cleared) by the lowered code after each invoke */
uintptr_t __THREW__ = 0;
int __threwValue = 0;
static int temp_ret0;

void setTempRet0(int v) { temp_ret0 = v; }
int getTempRet0(void) { return temp_ret0; }

void __wasm_setjmp(void *env, uint32_t label, void *func_invocation_id) {
    jmp_buf *jb = env;
    (*jb)->func_invocation_id = func_invocation_id;
    (*jb)->label = label;
}

/* the setjmp label of env if it belongs to this activation of the function, else 0 (longjmp further out) */
uint32_t __wasm_setjmp_test(void *env, void *func_invocation_id) {
    jmp_buf *jb = env;
    return (*jb)->func_invocation_id == func_invocation_id ? (*jb)->label : 0;
}

_Noreturn void emscripten_longjmp(uintptr_t env, int val) {
    __THREW__ = env;
    __threwValue = val ? val : 1; /* longjmp(env, 0) makes setjmp return 1 */
    capsule_unwind();
}

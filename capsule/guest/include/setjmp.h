/* setjmp/longjmp for capsule guests (Debian's wasi-libc has none).
 *
 * clang lowers calls to setjmp/longjmp itself (-mllvm -enable-emscripten-sjlj): a function that calls setjmp
 * records (jmp_buf, label, its own invocation) with __wasm_setjmp, and wraps every call that might longjmp in
 * an `invoke_*` import that capsule's compiler turns into a call whose frame catches an unwind. longjmp
 * (emscripten_longjmp, in sjlj.c) records the target and the value and unwinds the software stack to the
 * nearest such call; the caller then finds its jmp_buf with __wasm_setjmp_test and resumes at the setjmp. */
#ifndef CAPSULE_SETJMP_H
#define CAPSULE_SETJMP_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *func_invocation_id; /* which activation of the function that called setjmp */
    unsigned label;           /* which setjmp call in it */
    unsigned reserved[6];
} jmp_buf[1];
typedef jmp_buf sigjmp_buf;

int setjmp(jmp_buf env) __attribute__((returns_twice));
void longjmp(jmp_buf env, int val) __attribute__((noreturn));
#define _setjmp setjmp
#define _longjmp longjmp
#define sigsetjmp(env, savemask) setjmp(env)
#define siglongjmp longjmp

#ifdef __cplusplus
}
#endif
#endif

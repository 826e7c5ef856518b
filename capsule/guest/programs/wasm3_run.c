/* wasm3_run: call one function of a wasm module with the wasm3 interpreter, written for capsule.
 *
 * The pywasm3 sdist carries wasm3's engine (wasm3/*.c) but not its command-line app, so this is the smallest
 * front end that runs a module (capsule.sources.wasm3 builds it natively and for the guest, from the same file):
 *
 *     wasm3 FILE FUNCTION [ARGS...]
 *
 * loads FILE (a module without imports), calls the exported FUNCTION with ARGS (decimal integers or floats,
 * parsed by wasm3 for the function's parameter types) and prints each result on its own line: i32 and i64
 * as signed decimals, f32 and f64 with %.9g and %.17g. A module that does not load or a call that traps
 * prints "wasm3: " and wasm3's message on stderr and exits with status 1. Inside capsule this is a wasm
 * interpreter compiled from wasm, running a wasm module. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "wasm3.h"

#define STACK_BYTES (64 * 1024)
#define MAX_RESULTS 16

union value {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
};

static int fail(const char *what, M3Result result) {
    fprintf(stderr, "wasm3: %s: %s\n", what, result);
    return 1;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, 2 * cap);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: wasm3 FILE FUNCTION [ARGS...]\n");
        return 2;
    }
    size_t len;
    uint8_t *bytes = read_file(argv[1], &len);
    if (!bytes) {
        perror(argv[1]);
        return 2;
    }
    IM3Environment env = m3_NewEnvironment();
    IM3Runtime runtime = env ? m3_NewRuntime(env, STACK_BYTES, NULL) : NULL;
    if (!runtime) {
        fprintf(stderr, "wasm3: cannot create the runtime\n");
        return 1;
    }
    int status = 0;
    IM3Module module;
    IM3Function function;
    M3Result result = m3_ParseModule(env, &module, bytes, (uint32_t)len);
    if (result) {
        status = fail("parse", result);
    } else if ((result = m3_LoadModule(runtime, module))) {
        m3_FreeModule(module);
        status = fail("load", result);
    } else if ((result = m3_FindFunction(&function, runtime, argv[2]))) {
        status = fail(argv[2], result);
    } else if ((result = m3_CallArgv(function, (uint32_t)(argc - 3), (const char **)argv + 3))) {
        status = fail(argv[2], result);
    } else {
        uint32_t n = m3_GetRetCount(function);
        union value values[MAX_RESULTS];
        const void *slots[MAX_RESULTS];
        for (uint32_t i = 0; i < n && i < MAX_RESULTS; i++)
            slots[i] = &values[i];
        if (n > MAX_RESULTS)
            status = fail("results", "more results than this front end prints");
        else if ((result = m3_GetResults(function, n, slots)))
            status = fail("results", result);
        for (uint32_t i = 0; i < n && status == 0; i++) {
            M3ValueType type = m3_GetRetType(function, i);
            if (type == c_m3Type_i32)
                printf("%" PRId32 "\n", values[i].i32);
            else if (type == c_m3Type_i64)
                printf("%" PRId64 "\n", values[i].i64);
            else if (type == c_m3Type_f32)
                printf("%.9g\n", (double)values[i].f32);
            else
                printf("%.17g\n", values[i].f64);
        }
    }
    m3_FreeRuntime(runtime);
    m3_FreeEnvironment(env);
    free(bytes);
    return status;
}

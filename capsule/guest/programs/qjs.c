/* qjs: a command-line front end for the QuickJS engine, written for capsule.
 *
 * The quickjs sdist on PyPI carries the engine but not Bellard's qjs.c and quickjs-libc.c, so this is the
 * smallest interpreter a script needs (capsule.sources.quickjs builds it natively and for the guest, from
 * the same file):
 *
 *     qjs FILE [ARGS...]
 *
 * evaluates FILE as a global script with `print(...)` and `console.log(...)` (arguments converted to strings,
 * joined by spaces, a newline after) and `scriptArgs` (FILE and ARGS), then runs the job queue (Promise
 * reactions) until it is empty. An exception nobody catches, in the script or in a job, is printed on stderr
 * as the thrown value followed by its stack (for Error objects), no further job runs, and qjs exits with
 * status 1; otherwise 0.
 * Everything is freed before exit, so the engine's own leak checks hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quickjs.h"

static JSValue js_print(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    for (int i = 0; i < argc; i++) {
        size_t len;
        const char *s = JS_ToCStringLen(ctx, &len, argv[i]);
        if (!s)
            return JS_EXCEPTION;
        if (i)
            putchar(' ');
        fwrite(s, 1, len, stdout);
        JS_FreeCString(ctx, s);
    }
    putchar('\n');
    return JS_UNDEFINED;
}

/* The pending exception on stderr: the value as a string, then the stack of an Error. */
static void report(JSContext *ctx) {
    JSValue e = JS_GetException(ctx);
    const char *s = JS_ToCString(ctx, e);
    fprintf(stderr, "%s\n", s ? s : "[exception]");
    JS_FreeCString(ctx, s);
    if (JS_IsError(ctx, e)) {
        JSValue stack = JS_GetPropertyStr(ctx, e, "stack");
        if (!JS_IsUndefined(stack)) {
            const char *t = JS_ToCString(ctx, stack);
            if (t)
                fputs(t, stderr);
            JS_FreeCString(ctx, t);
        }
        JS_FreeValue(ctx, stack);
    }
    JS_FreeValue(ctx, e);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
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
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static void add_globals(JSContext *ctx, int argc, char **argv) {
    JSValue global = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, global, "print", JS_NewCFunction(ctx, js_print, "print", 1));
    JSValue console = JS_NewObject(ctx);
    JS_SetPropertyStr(ctx, console, "log", JS_NewCFunction(ctx, js_print, "log", 1));
    JS_SetPropertyStr(ctx, global, "console", console);
    JSValue args = JS_NewArray(ctx);
    for (int i = 1; i < argc; i++)
        JS_SetPropertyUint32(ctx, args, (uint32_t)(i - 1), JS_NewString(ctx, argv[i]));
    JS_SetPropertyStr(ctx, global, "scriptArgs", args);
    JS_FreeValue(ctx, global);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: qjs FILE [ARGS...]\n");
        return 2;
    }
    size_t len;
    char *code = read_file(argv[1], &len);
    if (!code) {
        perror(argv[1]);
        return 2;
    }
    JSRuntime *rt = JS_NewRuntime();
    JSContext *ctx = rt ? JS_NewContext(rt) : NULL;
    if (!ctx) {
        fprintf(stderr, "qjs: cannot create the JavaScript runtime\n");
        return 2;
    }
    add_globals(ctx, argc, argv);
    int status = 0;
    JSValue result = JS_Eval(ctx, code, len, argv[1], JS_EVAL_TYPE_GLOBAL);
    free(code);
    if (JS_IsException(result)) {
        report(ctx);
        status = 1;
    }
    JS_FreeValue(ctx, result);
    while (status == 0) { /* as Bellard's qjs: after an uncaught exception in the script no job runs */
        JSContext *job_ctx;
        int r = JS_ExecutePendingJob(rt, &job_ctx);
        if (r == 0)
            break;
        if (r < 0) {
            report(job_ctx);
            status = 1;
        }
    }
    fflush(stdout);
    JS_FreeContext(ctx);
    JS_FreeRuntime(rt);
    return status;
}

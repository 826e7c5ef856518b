/* lua_observer.c: a Lua 5.4 script as a packet handler (`capsule attach xdp --lua SCRIPT.lua`).
 *
 * Every CPU has a Lua VM of its own, on a heap of its own (carved from the shared heap, used without a
 * lock), so CPUs never wait for each other and a VM's state (its tables: counts, top talkers, windows) lives
 * across the packets of that CPU. The host loads the script into each VM before attaching
 * (capsule_lua_setup, capsule_lua_open); the script's top level runs once and defines
 *
 *     function on_packet(pkt) ... end     -- called for every packet; returns a verdict (below) or nothing
 *
 * The packet is a (light) userdata over the fiber's copy of it (valid during the call only):
 *     pkt:len() (also #pkt)   its length;  pkt:captured()  the bytes copied (the snap length)
 *     pkt:byte(i [, j])       bytes i..j, 1-based, as string.byte;  pkt:sub(i [, j])  as string.sub
 *     pkt:u8(off) pkt:u16(off) pkt:u32(off)   the big-endian integer at 0-based byte offset off, or nil
 *     pkt:cpu() pkt:seq() pkt:ifindex() pkt:queue()
 * Verdicts: PASS, DROP, TX (globals), true (pass), false (drop); nil or nothing passes.
 * print and io.write go to the host through the ring buffer, a line per call.
 *
 * An error in on_packet (a Lua error, running past LUA_STEPS instructions, running out of the VM's memory)
 * is caught, reported with its message, and the packet gets the default verdict; the VM goes on with its
 * state. A packet abandoned inside the VM (the capsule budget, a trap) may leave the VM half changed: the
 * next packet finds it busy, marks it broken (packets then get the default verdict), and the host restores
 * the VM as it was after the script's top level ran (capsule/hooks/lua.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <capsule_hook.h>

#include "heap.h"
#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

#define MAX_VMS 64
#define STEP_CHUNK 1000 /* instructions between two calls of the count hook */

enum { VM_EMPTY = 0, VM_READY = 1, VM_BROKEN = 2 };

/* one per fiber; the host snapshots and restores everything but the counters (capsule/hooks/lua.py) */
struct lua_vm {
    uint32_t state;  /*  0 */
    uint32_t busy;   /*  4: 1 while a packet runs in the VM */
    lua_State *L;    /*  8 */
    uint32_t region; /* 12: the VM's heap region (from the shared heap) */
    uint32_t size;   /* 16: its size */
    int32_t unused;  /* 20 */
    int32_t fn_ref;  /* 24: on_packet, in the registry */
    uint32_t steps;  /* 28: count-hook calls in this packet */
    struct capsule_heap heap; /* 32 */
};
_Static_assert(sizeof(struct lua_vm) == 32 + sizeof(struct capsule_heap), "lua_vm layout (hooks/lua.py)");

struct lua_vm_counts {
    uint64_t packets, errors, aborts, skipped;
};

struct lua_vm capsule_lua_vm[MAX_VMS];
struct lua_vm_counts capsule_lua_count[MAX_VMS];
static char *script;
static uint32_t script_len, vm_heap_bytes;
uint32_t lua_steps = 100000; /* Lua instructions one packet may run (the host may change it) */

struct packet {
    const uint8_t *data;
    struct capsule_packet_info *info;
};
/* the packet object of each VM: a light userdata over its entry (no allocation, no registry look-up per
 * packet; light userdata share one metatable, which the VM gives "capsule.packet"'s) */
static struct packet packet_of[MAX_VMS];

void rt_hook_write(uint32_t fd, const uint8_t *p, size_t n);

__attribute__((export_name("capsule_lua_vms"))) struct lua_vm *capsule_lua_vms(void) { return capsule_lua_vm; }
__attribute__((export_name("capsule_lua_counts"))) struct lua_vm_counts *capsule_lua_counts(void) {
    return capsule_lua_count;
}

static void *vm_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    (void)osize;
    struct lua_vm *vm = ud;
    if (!nsize) {
        heap_free(&vm->heap, ptr);
        return NULL;
    }
    return heap_realloc(&vm->heap, ptr, nsize);
}

static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    struct lua_vm *vm = *(struct lua_vm **)lua_getextraspace(L);
    if (++vm->steps * STEP_CHUNK > lua_steps)
        luaL_error(L, "the packet ran more than %d Lua instructions", (int)lua_steps);
}

/* -- the packet object ---------------------------------------------------------------------------------- */
/* The method's self: the VM's packet (a pointer compare, where luaL_checkudata would look the metatable up
 * by name in the registry on every call). */
static struct packet *check_packet(lua_State *L) {
    struct lua_vm *vm = *(struct lua_vm **)lua_getextraspace(L);
    struct packet *p = lua_touserdata(L, 1);
    if (p != &packet_of[vm - capsule_lua_vm])
        luaL_typeerror(L, 1, "capsule.packet");
    return p;
}

static int p_len(lua_State *L) {
    lua_pushinteger(L, check_packet(L)->info->len);
    return 1;
}
static int p_captured(lua_State *L) {
    lua_pushinteger(L, check_packet(L)->info->captured);
    return 1;
}
static int p_cpu(lua_State *L) {
    lua_pushinteger(L, check_packet(L)->info->cpu);
    return 1;
}
static int p_seq(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)check_packet(L)->info->seq);
    return 1;
}
static int p_ifindex(lua_State *L) {
    lua_pushinteger(L, check_packet(L)->info->ifindex);
    return 1;
}
static int p_queue(lua_State *L) {
    lua_pushinteger(L, check_packet(L)->info->queue);
    return 1;
}

/* string.sub's and string.byte's index rules (1-based, negatives from the end) over the captured bytes */
static lua_Integer pos_start(lua_Integer i, lua_Integer n) { return i > 0 ? i : i == 0 ? 1 : i < -n ? 1 : n + i + 1; }
static lua_Integer pos_end(lua_Integer j, lua_Integer n) { return j > n ? n : j >= 0 ? j : j < -n ? 0 : n + j + 1; }

static int p_byte(lua_State *L) {
    struct packet *p = check_packet(L);
    lua_Integer n = p->info->captured;
    lua_Integer i = pos_start(luaL_optinteger(L, 2, 1), n);
    lua_Integer j = pos_end(luaL_optinteger(L, 3, i), n);
    if (i > j)
        return 0;
    luaL_checkstack(L, (int)(j - i + 1), "packet slice too long");
    for (lua_Integer k = i; k <= j; k++)
        lua_pushinteger(L, p->data[k - 1]);
    return (int)(j - i + 1);
}

static int p_sub(lua_State *L) {
    struct packet *p = check_packet(L);
    lua_Integer n = p->info->captured;
    lua_Integer i = pos_start(luaL_optinteger(L, 2, 1), n);
    lua_Integer j = pos_end(luaL_optinteger(L, 3, -1), n);
    lua_pushlstring(L, i > j ? "" : (const char *)p->data + i - 1, i > j ? 0 : (size_t)(j - i + 1));
    return 1;
}

static int p_int(lua_State *L, int width) {
    struct packet *p = check_packet(L);
    lua_Integer off = luaL_checkinteger(L, 2);
    if (off < 0 || off + width > (lua_Integer)p->info->captured)
        return 0;
    lua_Integer v = 0;
    for (int k = 0; k < width; k++)
        v = v << 8 | p->data[off + k];
    lua_pushinteger(L, v);
    return 1;
}
static int p_u8(lua_State *L) { return p_int(L, 1); }
static int p_u16(lua_State *L) { return p_int(L, 2); }
static int p_u32(lua_State *L) { return p_int(L, 4); }

static int p_tostring(lua_State *L) {
    struct packet *p = check_packet(L);
    lua_pushfstring(L, "packet(len=%d, cpu=%d)", (int)p->info->len, (int)p->info->cpu);
    return 1;
}

static const luaL_Reg packet_methods[] = {
    {"len", p_len}, {"captured", p_captured}, {"byte", p_byte}, {"sub", p_sub}, {"u8", p_u8}, {"u16", p_u16},
    {"u32", p_u32}, {"cpu", p_cpu}, {"seq", p_seq}, {"ifindex", p_ifindex}, {"queue", p_queue}, {NULL, NULL},
};

/* -- output: a record per call, so lines from several CPUs stay whole ------------------------------------ */
static int l_print(lua_State *L) {
    int n = lua_gettop(L);
    luaL_Buffer out;
    luaL_buffinit(L, &out);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (i > 1)
            luaL_addchar(&out, '\t');
        luaL_addlstring(&out, s, len);
        lua_pop(L, 1);
    }
    luaL_addchar(&out, '\n');
    luaL_pushresult(&out);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    rt_hook_write(1, (const uint8_t *)s, len);
    return 0;
}

static int l_write(lua_State *L) {
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_checklstring(L, i, &len);
        rt_hook_write(1, (const uint8_t *)s, len);
    }
    return 0;
}

/* -- set-up, on the host's fiber --------------------------------------------------------------------------- */
/* The libraries a packet script can use: not io (files), os (processes, the clock), package (loading code)
 * or debug, which have nothing to do in a hook; leaving them out also keeps the program (and the time the
 * verifier takes over it) smaller. */
static void open_libs(lua_State *L) {
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},       {LUA_COLIBNAME, luaopen_coroutine},
                                    {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}};
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
        luaL_requiref(L, libs[i].name, libs[i].func, 1);
        lua_pop(L, 1);
    }
}

/* Close the VM of `fiber` and give its heap region back, so that another script can be loaded. */
__attribute__((export_name("capsule_lua_close"))) void capsule_lua_close(int32_t fiber) {
    if (fiber < 0 || fiber >= MAX_VMS)
        return;
    struct lua_vm *vm = &capsule_lua_vm[fiber];
    if (vm->state == VM_EMPTY)
        return;
    vm->state = VM_EMPTY; /* first: the fiber's packets stop using the VM */
    free((void *)(uintptr_t)vm->region);
    memset((uint8_t *)vm + sizeof vm->state, 0, sizeof *vm - sizeof vm->state);
    memset(&capsule_lua_count[fiber], 0, sizeof capsule_lua_count[fiber]);
}
__attribute__((export_name("capsule_lua_setup"))) char *capsule_lua_setup(uint32_t len, uint32_t heap_bytes) {
    free(script);
    script = malloc(len ? len : 1);
    script_len = len;
    vm_heap_bytes = heap_bytes;
    return script;
}

/* Make the VM of `fiber` and run the script's top level in it: 0, or -1 with the error printed. */
__attribute__((export_name("capsule_lua_open"))) int32_t capsule_lua_open(int32_t fiber) {
    if (fiber < 0 || fiber >= MAX_VMS || !script)
        return -1;
    struct lua_vm *vm = &capsule_lua_vm[fiber];
    if (vm->state != VM_EMPTY)
        return -1;
    void *region = malloc(vm_heap_bytes);
    if (!region) {
        printf("lua: no memory for a VM heap of %u bytes\n", vm_heap_bytes);
        return -1;
    }
    vm->region = (uint32_t)(uintptr_t)region;
    vm->size = vm_heap_bytes;
    heap_init(&vm->heap, vm->region, vm->region + vm->size, 0, 0);
    lua_State *L = lua_newstate(vm_alloc, vm);
    if (!L)
        return -1;
    vm->L = L;
    *(struct lua_vm **)lua_getextraspace(L) = vm;
    open_libs(L);
    lua_pushcfunction(L, l_print);
    lua_setglobal(L, "print");
    lua_newtable(L); /* io: only write, to the ring */
    lua_pushcfunction(L, l_write);
    lua_setfield(L, -2, "write");
    lua_setglobal(L, "io");
    lua_pushinteger(L, CAPSULE_PASS);
    lua_setglobal(L, "PASS");
    lua_pushinteger(L, CAPSULE_DROP);
    lua_setglobal(L, "DROP");
    lua_pushinteger(L, CAPSULE_TX);
    lua_setglobal(L, "TX");
    luaL_newmetatable(L, "capsule.packet");
    luaL_newlib(L, packet_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, p_len);
    lua_setfield(L, -2, "__len");
    lua_pushcfunction(L, p_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_pushlightuserdata(L, &packet_of[fiber]);
    luaL_setmetatable(L, "capsule.packet");
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, script, script_len, "=script") != LUA_OK || lua_pcall(L, 0, 0, 0) != LUA_OK) {
        printf("lua: %s\n", lua_tostring(L, -1));
        return -1;
    }
    if (lua_getglobal(L, "on_packet") != LUA_TFUNCTION) {
        printf("lua: the script defines no function on_packet(pkt)\n");
        return -1;
    }
    vm->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_gc(L, LUA_GCCOLLECT);
    if (lua_steps)
        lua_sethook(L, count_hook, LUA_MASKCOUNT, STEP_CHUNK);
    vm->state = VM_READY;
    return 0;
}

/* -- the packet handler ------------------------------------------------------------------------------------ */
static int verdict_of(lua_State *L) {
    switch (lua_type(L, -1)) {
    case LUA_TNIL:
    case LUA_TNONE:
        return CAPSULE_PASS;
    case LUA_TBOOLEAN:
        return lua_toboolean(L, -1) ? CAPSULE_PASS : CAPSULE_DROP;
    case LUA_TNUMBER:
        return (int)lua_tointeger(L, -1);
    default:
        return 0;
    }
}

CAPSULE_HANDLER int capsule_lua_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    (void)len;
    uint32_t cpu = info->cpu;
    if (cpu >= MAX_VMS)
        return 0;
    struct lua_vm *vm = &capsule_lua_vm[cpu];
    struct lua_vm_counts *count = &capsule_lua_count[cpu];
    if (vm->state != VM_READY) {
        count->skipped++;
        return 0; /* the default verdict */
    }
    if (vm->busy) { /* the last packet was abandoned inside the VM: it may be half changed */
        vm->state = VM_BROKEN;
        vm->busy = 0;
        count->aborts++;
        count->skipped++;
        printf("lua: cpu %u: packet %llu left the VM unfinished; it is restored\n", cpu,
               (unsigned long long)info->seq - 1);
        return 0;
    }
    vm->busy = 1;
    count->packets++;
    vm->steps = 0;
    lua_State *L = vm->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, vm->fn_ref);
    struct packet *p = &packet_of[cpu];
    lua_pushlightuserdata(L, p);
    p->data = pkt;
    p->info = info;
    int verdict;
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        count->errors++;
        const char *msg = lua_tostring(L, -1);
        printf("lua error: cpu %u packet %llu: %s\n", cpu, (unsigned long long)info->seq, msg ? msg : "?");
        verdict = 0;
    } else {
        verdict = verdict_of(L);
    }
    lua_settop(L, 0);
    vm->busy = 0;
    return verdict;
}

/* A packet handler whose behaviour the test chooses by writing `mode` (a global the host writes by name):
 * the faults a hook must survive, and the ordinary things around them. */
#include <capsule_hook.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t mode;
volatile int zero;
volatile uint64_t spins;
_Atomic uint64_t handled;
uint64_t last_len, last_captured, last_cpu, last_seq, last_hook, last_ifindex;
uint32_t allocations;
_Alignas(4) volatile uint32_t word = 5;
uint32_t woken = 99, waited = 99;

__attribute__((noinline)) static int divide(int a, int b) { return a / b; }
__attribute__((noinline)) static int recurse(volatile int n) { return n ? recurse(n + 1) + 1 : 0; }
__attribute__((noinline)) static int wild(uint32_t at) { return *(volatile int *)(uintptr_t)at; }

CAPSULE_HANDLER int on_packet(const uint8_t *pkt, uint32_t len, struct capsule_packet_info *info) {
    handled++;
    last_len = len;
    last_captured = info->captured;
    last_cpu = info->cpu;
    last_seq = info->seq;
    last_hook = info->hook;
    last_ifindex = info->ifindex;
    switch (mode) {
    case 1: /* loops for ever */
        for (;;)
            spins++;
    case 2: /* recurses without end */
        return recurse(1);
    case 3: /* divides by zero */
        return divide((int)len, zero);
    case 4: /* reads far past memory */
        return wild(0xE0000000u);
    case 5:
        exit(3);
    case 6:
        return 77; /* not a verdict */
    case 7: { /* changes the packet: the kernel copies it back */
        uint8_t *p = (uint8_t *)pkt;
        for (uint32_t i = 0; i < info->captured; i++)
            p[i] ^= 0xff;
        info->changed = 1;
        return CAPSULE_PASS;
    }
    case 8: { /* allocates until the heap says no: it must, cleanly */
        void **chain = NULL;
        uint32_t n = 0;
        for (;;) {
            void **b = malloc(1 << 16);
            if (!b)
                break;
            *b = chain;
            chain = b;
            n++;
        }
        allocations = n;
        while (chain) {
            void **next = *chain;
            free(chain);
            chain = next;
        }
        printf("allocated %u blocks of 64 KiB before malloc failed\n", n);
        return CAPSULE_PASS;
    }
    case 9: /* more output than the ring holds */
        for (int i = 0; i < 20000; i++)
            printf("line %d of a flood\n", i);
        return CAPSULE_PASS;
    case 10:
        return CAPSULE_TX;
    case 11:
        return CAPSULE_DEFAULT;
    case 12: /* wakes waiters on a word: nobody can be waiting in a BPF program */
        woken = (uint32_t)__builtin_wasm_memory_atomic_notify((int *)&word, 1);
        return CAPSULE_PASS;
    case 13: /* waits for a word to change (1 ms at most) while it holds what it is waited on with */
        waited = (uint32_t)__builtin_wasm_memory_atomic_wait32((int *)&word, (int)word, 1000000);
        return CAPSULE_PASS;
    case 14: /* the same, but the word already differs */
        waited = (uint32_t)__builtin_wasm_memory_atomic_wait32((int *)&word, (int)word + 1, -1);
        return CAPSULE_PASS;
    default:
        if (len && pkt[0] == 0xff)
            return CAPSULE_DROP;
        printf("packet %llu: %u bytes, first %02x\n", (unsigned long long)info->seq, len, len ? pkt[0] : 0);
        return CAPSULE_PASS;
    }
}

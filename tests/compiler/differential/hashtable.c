/* An open-addressing hash table (linear probing, tombstones, growth by rehash) keyed by 64-bit integers.
 * State lives in linear memory across calls; the harness drives both runtimes with the same operations. */
typedef unsigned long long u64;
typedef long long i64;

#define CAP_MAX 65536
enum { EMPTY = 0, FULL = 1, TOMB = 2 };
struct slot { u64 key; i64 value; int state; };
static struct slot table[CAP_MAX];
static struct slot old[CAP_MAX];
static unsigned cap = 16, count = 0, tombs = 0;

static unsigned hash(u64 k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return (unsigned)k;
}

static unsigned find(u64 key) {  /* slot of key, or the first free slot on its probe path */
    unsigned i = hash(key) & (cap - 1), free = ~0u;
    for (;;) {
        if (table[i].state == EMPTY) return free != ~0u ? free : i;
        if (table[i].state == TOMB) { if (free == ~0u) free = i; }
        else if (table[i].key == key) return i;
        i = (i + 1) & (cap - 1);
    }
}

static int insert_raw(u64 key, i64 value);

static void rehash(unsigned newcap) {
    for (unsigned i = 0; i < cap; i++) old[i] = table[i];
    unsigned oc = cap;
    cap = newcap; count = 0; tombs = 0;
    for (unsigned i = 0; i < cap; i++) table[i].state = EMPTY;
    for (unsigned i = 0; i < oc; i++) if (old[i].state == FULL) insert_raw(old[i].key, old[i].value);
}

static int insert_raw(u64 key, i64 value) {
    unsigned i = find(key);
    int fresh = table[i].state != FULL;
    if (table[i].state == TOMB) tombs--;
    if (fresh) count++;
    table[i].key = key; table[i].value = value; table[i].state = FULL;
    return fresh;
}

/* 1 if new, 0 if replaced, -1 if full */
int ht_insert(u64 key, i64 value) {
    if ((count + tombs + 1) * 4 > cap * 3) {
        unsigned nc = cap;
        while ((count + 1) * 2 > nc && nc < CAP_MAX) nc *= 2;
        if ((count + 1) * 4 > nc * 3) return -1;
        rehash(nc);
    }
    return insert_raw(key, value);
}

i64 ht_lookup(u64 key, i64 missing) {
    unsigned i = find(key);
    return table[i].state == FULL && table[i].key == key ? table[i].value : missing;
}

int ht_delete(u64 key) {
    unsigned i = find(key);
    if (table[i].state != FULL || table[i].key != key) return 0;
    table[i].state = TOMB; count--; tombs++;
    return 1;
}

unsigned ht_count(void) { return count; }
unsigned ht_cap(void) { return cap; }

void ht_clear(void) { for (unsigned i = 0; i < CAP_MAX; i++) table[i].state = EMPTY; cap = 16; count = tombs = 0; }

/* a whole workload in one call: n random operations, a checksum of every answer */
i64 ht_workload(int n, u64 seed) {
    ht_clear();
    i64 h = 0;
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        u64 key = (seed >> 40) % (u64)(n / 2 + 1);
        switch ((seed >> 20) % 4) {
        case 0: case 1: h = h * 3 + ht_insert(key, (i64)seed); break;
        case 2: h = h * 5 + ht_lookup(key, -1); break;
        default: h = h * 7 + ht_delete(key); break;
        }
    }
    return h ^ count;
}

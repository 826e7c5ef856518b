/* zround: deflate and inflate a few MB through zlib, the same way natively and in the kernel.
 *
 *   zround deflate SIZE LEVEL OUT   generate SIZE bytes, compress them (zlib format) into the file OUT
 *   zround inflate SIZE IN          inflate the file IN and check it is exactly the generated SIZE bytes
 *
 * Commands may follow one another on one command line. stdout gets only facts that must be identical in
 * every build (sizes, checksums); stderr gets "time_ns <command> <n>", the time the zlib work took by the
 * monotonic clock (the kernel's clock in the guest), so the caller can compare speeds without counting the
 * program's loading. The data is text-like (words from a small vocabulary, numbers, a little noise), so
 * deflate finds matches at every distance and literal coding matters too: closer to real input than random
 * bytes (incompressible) or repeated patterns (trivially compressible).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static unsigned char *generate(size_t size) {
    static const char *words[] = {"the", "kernel", "verifier", "accepts", "program", "region", "fiber",
                                  "window", "dispatcher", "bounded", "loop", "stack", "memory", "zlib",
                                  "deflate", "inflate", "window", "match", "literal", "huffman", "tree"};
    unsigned char *buf = malloc(size);
    size_t at = 0;
    rng = 0x9E3779B97F4A7C15ull;
    if (!buf) return NULL;
    while (at < size) {
        char piece[32];
        uint32_t r = next();
        int n;
        if (r % 16 == 0)
            n = snprintf(piece, sizeof piece, "%u ", next() % 100000);
        else if (r % 61 == 0) { /* two noise bytes (drawn in sequence: argument order is unspecified) */
            piece[0] = (char)(next() & 0xff);
            piece[1] = (char)(next() & 0xff);
            n = 2;
        }
        else if (r % 13 == 0)
            n = snprintf(piece, sizeof piece, ".\n");
        else
            n = snprintf(piece, sizeof piece, "%s ", words[(r >> 8) % (sizeof words / sizeof *words)]);
        if ((size_t)n > size - at) n = (int)(size - at);
        memcpy(buf + at, piece, (size_t)n);
        at += (size_t)n;
    }
    return buf;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int do_deflate(size_t size, int level, const char *out) {
    unsigned char *data = generate(size);
    uLong bound = compressBound(size);
    unsigned char *z = malloc(bound);
    if (!data || !z) {
        printf("out of memory\n");
        return 2;
    }
    /* A stream in 64 KiB input pieces, the way a program feeding zlib from a file would. */
    z_stream s;
    memset(&s, 0, sizeof s);
    uint64_t t0 = now_ns();
    if (deflateInit(&s, level) != Z_OK) return 3;
    s.next_out = z;
    s.avail_out = (uInt)bound;
    size_t at = 0;
    int rc;
    do {
        size_t piece = size - at < 65536 ? size - at : 65536;
        s.next_in = data + at;
        s.avail_in = (uInt)piece;
        at += piece;
        rc = deflate(&s, at == size ? Z_FINISH : Z_NO_FLUSH);
    } while (rc == Z_OK && at < size);
    while (rc == Z_OK) rc = deflate(&s, Z_FINISH);
    uint64_t t1 = now_ns();
    if (rc != Z_STREAM_END) {
        printf("deflate failed: %d\n", rc);
        return 4;
    }
    size_t zsize = s.total_out;
    deflateEnd(&s);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(z, 1, zsize, f) != zsize || fclose(f) != 0) {
        printf("cannot write %s\n", out);
        return 5;
    }
    printf("deflate level %d: %zu -> %zu bytes, crc32 %08lx, adler32 of output %08lx\n", level, size, zsize,
           crc32(0, data, (uInt)size), adler32(1, z, (uInt)zsize));
    fprintf(stderr, "time_ns deflate %llu\n", (unsigned long long)(t1 - t0));
    free(data);
    free(z);
    return 0;
}

static int do_inflate(size_t size, const char *in) {
    FILE *f = fopen(in, "rb");
    if (!f) {
        printf("cannot open %s\n", in);
        return 6;
    }
    fseek(f, 0, SEEK_END);
    long zsize = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *z = malloc((size_t)zsize);
    unsigned char *out = malloc(size + 1);
    if (!z || !out || fread(z, 1, (size_t)zsize, f) != (size_t)zsize) {
        printf("cannot read %s\n", in);
        return 7;
    }
    fclose(f);
    z_stream s;
    memset(&s, 0, sizeof s);
    uint64_t t0 = now_ns();
    if (inflateInit(&s) != Z_OK) return 8;
    s.next_in = z;
    s.avail_in = (uInt)zsize;
    /* Out in 32 KiB pieces so the inflater's window and its fast path both get used. */
    int rc = Z_OK;
    while (rc == Z_OK) {
        size_t room = size + 1 - s.total_out;
        s.next_out = out + s.total_out;
        s.avail_out = (uInt)(room < 32768 ? room : 32768);
        rc = inflate(&s, Z_NO_FLUSH);
    }
    uint64_t t1 = now_ns();
    size_t got = s.total_out;
    inflateEnd(&s);
    unsigned char *want = generate(size);
    int same = rc == Z_STREAM_END && got == size && want && memcmp(out, want, size) == 0;
    printf("inflate: %ld -> %zu bytes, status %d, crc32 %08lx, %s\n", zsize, got, rc, crc32(0, out, (uInt)got),
           same ? "identical to the generated data" : "DIFFERENT from the generated data");
    fprintf(stderr, "time_ns inflate %llu\n", (unsigned long long)(t1 - t0));
    free(z);
    free(out);
    free(want);
    return same ? 0 : 9;
}

int main(int argc, char **argv) {
    int i = 1;
    while (i < argc) {
        int rc;
        if (strcmp(argv[i], "deflate") == 0 && i + 3 < argc) {
            rc = do_deflate(strtoul(argv[i + 1], NULL, 10), atoi(argv[i + 2]), argv[i + 3]);
            i += 4;
        } else if (strcmp(argv[i], "inflate") == 0 && i + 2 < argc) {
            rc = do_inflate(strtoul(argv[i + 1], NULL, 10), argv[i + 2]);
            i += 3;
        } else {
            fprintf(stderr, "usage: zround {deflate SIZE LEVEL OUT | inflate SIZE IN}...\n");
            return 1;
        }
        if (rc) return rc;
    }
    printf("zlib %s\n", zlibVersion());
    return 0;
}

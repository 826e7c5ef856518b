/* Table-driven CRC-32 (IEEE) over n pseudo-random bytes (at most 16 MiB): table lookups and shifts. */
#define MAXN (16 << 20)
static unsigned table[256];
static unsigned char data[MAXN];

long long run(int n) {
    if (n > MAXN) n = MAXN;
    for (unsigned i = 0; i < 256; i++) {
        unsigned c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    unsigned seed = 12345;
    for (int i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; data[i] = (unsigned char)(seed >> 16); }
    unsigned crc = 0xFFFFFFFFu;
    for (int i = 0; i < n; i++) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return (long long)(crc ^ 0xFFFFFFFFu);
}

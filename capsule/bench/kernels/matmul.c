/* Integer matrix multiply C = A * B of n x n matrices (n at most 256): 32-bit multiply-adds, row-major
 * loads with an i-k-j loop order. */
#define MAXN 256
static int A[MAXN * MAXN], B[MAXN * MAXN], C[MAXN * MAXN];

long long run(int n) {
    if (n > MAXN) n = MAXN;
    unsigned seed = 7;
    for (int i = 0; i < n * n; i++) {
        seed = seed * 1103515245u + 12345u; A[i] = (int)(seed >> 20) - 2048;
        seed = seed * 1103515245u + 12345u; B[i] = (int)(seed >> 20) - 2048;
        C[i] = 0;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            int aik = A[i * n + k];
            for (int j = 0; j < n; j++) C[i * n + j] += aik * B[k * n + j];
        }
    long long h = 0;
    for (int i = 0; i < n * n; i++) h = h * 1000003 + C[i];
    return h;
}

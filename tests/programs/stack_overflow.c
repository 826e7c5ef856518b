/* Prints and flushes, then recurses without end with 64 bytes of C stack per frame: the flushed output must
 * reach the host unchanged and the overflow end in a trap (issue 16.2: it printed "starz6"). */
#include <stdio.h>
#include <string.h>
static int deep(int n) { volatile char buf[64]; memset((char *)buf, n, sizeof buf); return deep(n + 1) + buf[n & 63]; }
int main(void) { printf("start\n"); fflush(stdout); return deep(0); }

/* A short program for the fault-injection tests: three lines of output, each a yield to the host. */
#include <stdio.h>

int main(void) {
    for (int i = 1; i <= 3; i++) {
        printf("line %d\n", i);
        fflush(stdout);
    }
    return 0;
}

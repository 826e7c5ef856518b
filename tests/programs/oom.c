/* Exhausting memory: malloc returns NULL (the module is linked with a small --max-memory), and the
 * program goes on working after freeing. */
#include <stdio.h>
#include <stdlib.h>

static void *volatile huge;

int main(void) {
    void *blocks[4096];
    int n = 0;
    while (n < 4096 && (blocks[n] = malloc(1 << 20)) != NULL)
        n++;
    printf("allocated %s before NULL\n", n > 4 && n < 4096 ? "some MiB" : "a wrong amount");
    huge = malloc((size_t)3 << 30); /* kept in a volatile, or the compiler folds the NULL test away */
    printf("huge malloc %s\n", huge == NULL ? "NULL" : "non-NULL");
    for (int i = 0; i < n; i++)
        free(blocks[i]);
    void *again = malloc(1 << 20);
    printf("after free %s\n", again ? "ok" : "NULL");
    return n > 4 ? 0 : 1;
}

/* Allocates without bound, touching every page: a module the memory limit must stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each block escapes through it, so the compiler cannot drop the allocations. */
char *volatile last_block;

int main(void) {
    for (unsigned long total = 0;; total += 1 << 20) {
        char *block = malloc(1 << 20);
        if (!block) {
            fprintf(stderr, "malloc failed after %lu bytes\n", total);
            return 3;
        }
        memset(block, 1, 1 << 20);
        last_block = block;
    }
}

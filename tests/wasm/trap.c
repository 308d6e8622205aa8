/* Executes `unreachable`: a trap, the WebAssembly form of a crash. */
#include <stdio.h>

int main(void) {
    fprintf(stderr, "about to trap\n");
    __builtin_trap();
}

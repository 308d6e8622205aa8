/* Writes to stdout without end: a module the output limit must stop. */
#include <stdio.h>

int main(void) {
    for (;;) fputs("- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: flood}\n", stdout);
}

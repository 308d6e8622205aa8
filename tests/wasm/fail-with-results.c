/* A validating KRM function that always fails: a ResourceList carrying an error result on
 * stdout, a line on stderr, exit status 1. */
#include <stdio.h>

int main(void) {
    char buffer[4096];
    while (fread(buffer, 1, sizeof buffer, stdin) > 0) {
    }
    printf("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"
           "results:\n- message: replicas must not exceed 3\n  severity: error\n"
           "  resourceRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n");
    fprintf(stderr, "validation failed\n");
    return 1;
}

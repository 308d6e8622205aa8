/* A set-namespace KRM function as a WASI command: reads a ResourceList (YAML, as kpt and
 * Porch send it) on stdin and writes it on stdout with `metadata.namespace` of every item set
 * to the functionConfig's `data.namespace`. A line-based transformation, enough for the block
 * style kpt and krm-runner write: items at `- ` under `items:`, their fields indented by two. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(size_t *length) {
    size_t capacity = 1 << 16, used = 0;
    char *text = malloc(capacity + 1);
    size_t n;
    while (text && (n = fread(text + used, 1, capacity - used, stdin)) > 0) {
        used += n;
        if (used == capacity) {
            capacity *= 2;
            text = realloc(text, capacity + 1);
        }
    }
    if (text) text[used] = '\0';
    *length = used;
    return text;
}

static int starts_with(const char *line, const char *prefix) {
    return strncmp(line, prefix, strlen(prefix)) == 0;
}

/* The value of `data.namespace` in the functionConfig, or NULL: block style (`data:` then
 * `    namespace: x`) or flow style (`data: {namespace: x}`, as kpt writes it). */
static char *config_namespace(char *text) {
    char *config = strstr(text, "\nfunctionConfig:");
    if (!config) return NULL;
    char *data = strstr(config, "\n  data:");
    if (!data) return NULL;
    data += strlen("\n  data:");
    while (*data == ' ') data++;
    char *key;
    const char *end;
    if (*data == '{') {
        key = strstr(data, "namespace:");
        if (!key || key > data + strcspn(data, "}")) return NULL;
        key += strlen("namespace:");
        end = ",}\n";
    } else {
        key = strstr(data, "\n    namespace:");
        if (!key) return NULL;
        key += strlen("\n    namespace:");
        end = "\n";
    }
    while (*key == ' ') key++;
    size_t length = strcspn(key, end);
    while (length > 0 && key[length - 1] == ' ') length--;
    char *value = malloc(length + 1);
    memcpy(value, key, length);
    value[length] = '\0';
    return value;
}

int main(void) {
    size_t length;
    char *text = read_all(&length);
    if (!text) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    char *namespace = config_namespace(text);
    if (!namespace || !*namespace) {
        printf("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"
               "results:\n- message: functionConfig data.namespace is required\n"
               "  severity: error\n");
        fprintf(stderr, "set-namespace: no namespace given\n");
        return 1;
    }
    int in_items = 0, in_metadata = 0, items = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] != ' ' && line[0] != '-') in_items = starts_with(line, "items:");
        if (in_metadata && !starts_with(line, "    ")) in_metadata = 0;
        if (in_metadata && starts_with(line, "    namespace:")) continue;
        printf("%s\n", line);
        if (in_items && strcmp(line, "  metadata:") == 0) {
            printf("    namespace: %s\n", namespace);
            in_metadata = 1;
            items++;
        }
    }
    fprintf(stderr, "set-namespace: %d items in namespace %s\n", items, namespace);
    return 0;
}

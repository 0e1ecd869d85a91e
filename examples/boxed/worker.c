/* A boxed worker in C (docs/boxed.md): one request at a time.
 *
 * Each line on stdin is one JSON record; each line written to stdout is one.
 * A real worker would use a JSON library; this one reads the few fields it
 * needs with a small scanner, which is enough for its handlers' arguments
 * (integers and strings without escapes):
 *   add(a, b) -> a + b        greet(name) -> "hello, NAME"
 *   fail(message) -> an error of type CError
 * Build: cc -O2 -o worker-c worker.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The string value of "key":"..." in line, copied into out (at most size). */
static int field(const char *line, const char *key, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    const char *start = strstr(line, pattern);
    if (!start) return 0;
    start += strlen(pattern);
    const char *end = strchr(start, '"');
    if (!end || (size_t)(end - start) >= size) return 0;
    memcpy(out, start, end - start);
    out[end - start] = '\0';
    return 1;
}

/* The arguments: the text between "args":[ and the next ']'. */
static const char *args_of(const char *line) {
    const char *start = strstr(line, "\"args\":[");
    return start ? start + 8 : NULL;
}

/* A JSON string, escaped. */
static void put_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void error(const char *id, const char *type, const char *message) {
    printf("{\"type\":\"reply\",\"id\":");
    put_string(id);
    printf(",\"error\":{\"type\":");
    put_string(type);
    printf(",\"message\":");
    put_string(message);
    printf("}}\n");
}

static void request(const char *line) {
    char id[256], handler[64], text[1024];
    const char *args = args_of(line);
    if (!field(line, "id", id, sizeof id) || !field(line, "handler", handler, sizeof handler) || !args) {
        fprintf(stderr, "unreadable request: %s\n", line);
        return;
    }
    if (strcmp(handler, "add") == 0) {
        char *rest;
        long a = strtol(args, &rest, 10);
        long b = strtol(rest + 1, NULL, 10);
        printf("{\"type\":\"reply\",\"id\":");
        put_string(id);
        printf(",\"value\":%ld}\n", a + b);
    } else if (strcmp(handler, "greet") == 0 || strcmp(handler, "fail") == 0) {
        const char *start = strchr(args, '"'), *end = start ? strchr(start + 1, '"') : NULL;
        if (!end || (size_t)(end - start) >= sizeof text) {
            error(id, "TypeError", "expected one string argument");
            return;
        }
        memcpy(text, start + 1, end - start - 1);
        text[end - start - 1] = '\0';
        if (handler[0] == 'f') {
            error(id, "CError", text);
            return;
        }
        printf("{\"type\":\"reply\",\"id\":");
        put_string(id);
        printf(",\"value\":\"hello, ");
        fputs(text, stdout);
        printf("\"}\n");
    } else {
        error(id, "UnknownHandler", handler);
    }
}

int main(void) {
    char *line = NULL;
    size_t size = 0;
    printf("{\"type\":\"hello\",\"protocol\":1,\"handlers\":[\"add\",\"greet\",\"fail\"],\"concurrency\":1}\n");
    fflush(stdout);
    while (getline(&line, &size, stdin) > 0) {
        if (strncmp(line, "{\"type\":\"request\"", 17) == 0) request(line);
        else if (strncmp(line, "{\"type\":\"heartbeat\"", 19) == 0) printf("{\"type\":\"heartbeat\"}\n");
        else if (strncmp(line, "{\"type\":\"shutdown\"", 18) == 0) break;
        fflush(stdout);
    }
    free(line);
    return 0;
}

/* toml-test decoder for util/toml: reads a TOML file (or stdin) and prints it as toml-test's
 * tagged JSON ({"type":"integer","value":"42"}), so the corpus can check the parser.
 * Exit 0 with JSON on stdout, or 1 with "FILE:LINE: message" on stderr. */
#include "util/err.h"
#include "util/sbuf.h"
#include "util/toml.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_json_string(const char *s, size_t len) {
    putchar('"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void put_node(const struct toml_node *n) {
    enum toml_type t = toml_type(n);
    if (t == TOML_TABLE) {
        putchar('{');
        for (size_t i = 0; i < toml_len(n); i++) {
            size_t klen;
            const char *k = toml_key(n, i, &klen);
            if (i) putchar(',');
            put_json_string(k, klen);
            putchar(':');
            put_node(toml_value(n, i));
        }
        putchar('}');
        return;
    }
    if (t == TOML_ARRAY) {
        putchar('[');
        for (size_t i = 0; i < toml_len(n); i++) {
            if (i) putchar(',');
            put_node(toml_item(n, i));
        }
        putchar(']');
        return;
    }
    char buf[64];
    const char *s = buf;
    size_t len;
    int64_t iv;
    double dv;
    bool bv;
    if (t == TOML_STRING) {
        toml_string(n, &s, &len, NULL);
    } else if (t == TOML_INTEGER) {
        toml_int(n, &iv, NULL);
        len = (size_t)snprintf(buf, sizeof(buf), "%" PRId64, iv);
    } else if (t == TOML_FLOAT) {
        toml_double(n, &dv, NULL);
        if (isnan(dv)) len = (size_t)snprintf(buf, sizeof(buf), "nan");
        else if (isinf(dv)) len = (size_t)snprintf(buf, sizeof(buf), dv < 0 ? "-inf" : "inf");
        else len = (size_t)snprintf(buf, sizeof(buf), "%.17g", dv);
    } else if (t == TOML_BOOL) {
        toml_bool(n, &bv, NULL);
        len = (size_t)snprintf(buf, sizeof(buf), bv ? "true" : "false");
    } else {
        toml_datetime(n, &s, NULL);
        len = strlen(s);
    }
    printf("{\"type\":\"%s\",\"value\":", toml_type_name(t));
    put_json_string(s, len);
    putchar('}');
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "-";
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        perror(path);
        return 2;
    }
    struct sbuf in = {0};
    sbuf_add_stream(&in, f);
    if (f != stdin) fclose(f);
    char *buf = in.p;
    size_t len = in.len;
    struct toml_node *root;
    char err[ERR_LEN];
    int rc = toml_parse(buf, len, path, &root, err);
    free(buf);
    if (rc < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    put_node(root);
    putchar('\n');
    toml_free(root);
    return 0;
}

// link: tpd_toml
/* util/toml: each value type, the table rules, errors with their lines, lookups and typed
 * reads, depth and size limits, and every prefix / byte mutation of the toml-test corpus's
 * valid files (refused cleanly or parsed, never a crash or leak under the Asan build). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "util/err.h"
#include "util/toml.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CORPUS "/usr/share/gocode/src/github.com/BurntSushi/toml/internal/toml-test/tests/valid"

static struct toml_node *parse_ok(const char *doc) {
    struct toml_node *root = NULL;
    char err[ERR_LEN] = "";
    int rc = toml_parse(doc, strlen(doc), "t.toml", &root, err);
    if (rc != 0) fail_msg("unexpected error: %s", err);
    assert_non_null(root);
    return root;
}

/* Parses a document that must be refused and checks the whole message. */
static void parse_err_n(const char *doc, size_t len, const char *want) {
    struct toml_node *root = (struct toml_node *)1;
    char err[ERR_LEN] = "";
    assert_int_equal(toml_parse(doc, len, "t.toml", &root, err), -1);
    assert_null(root);
    assert_string_equal(err, want);
}

static void parse_err(const char *doc, const char *want) { parse_err_n(doc, strlen(doc), want); }
/* For documents with a NUL inside: the whole literal. */
#define PARSE_ERR_LIT(lit, want) parse_err_n(lit, sizeof(lit) - 1, want)

static void test_scalars(void **state) {
    (void)state;
    struct toml_node *r = parse_ok("s = \"str\"\n"
                                   "imin = -9_223_372_036_854_775_808\n"
                                   "imax = 9223372036854775807\n"
                                   "hex = 0xDEAD_beef\n"
                                   "oct = 0o755\n"
                                   "bin = 0b1101\n"
                                   "zero = -0\n"
                                   "f = 6.626e-34\n"
                                   "g = -1_000.5E+2_0\n"
                                   "ninf = -inf\n"
                                   "nan = +nan\n"
                                   "t = true\n"
                                   "odt = 1979-05-27 07:32:00.999999z\n"
                                   "odt2 = 1979-05-27T00:32:00-07:00\n"
                                   "ldt = 1979-05-27t07:32:00\n"
                                   "ld = 2000-02-29\n"
                                   "lt = 23:59:60.5\n");
    int64_t i;
    double d;
    bool b;
    const char *s;
    size_t len;
    assert_int_equal(toml_string(toml_get(r, "s"), &s, &len, NULL), 0);
    assert_string_equal(s, "str");
    assert_int_equal(len, 3);
    assert_int_equal(toml_int(toml_get(r, "imin"), &i, NULL), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(toml_int(toml_get(r, "imax"), &i, NULL), 0);
    assert_true(i == INT64_MAX);
    assert_int_equal(toml_int(toml_get(r, "hex"), &i, NULL), 0);
    assert_int_equal(i, 0xdeadbeef);
    assert_int_equal(toml_int(toml_get(r, "oct"), &i, NULL), 0);
    assert_int_equal(i, 0755);
    assert_int_equal(toml_int(toml_get(r, "bin"), &i, NULL), 0);
    assert_int_equal(i, 13);
    assert_int_equal(toml_int(toml_get(r, "zero"), &i, NULL), 0);
    assert_int_equal(i, 0);
    assert_int_equal(toml_double(toml_get(r, "f"), &d, NULL), 0);
    assert_true(d == 6.626e-34);
    assert_int_equal(toml_double(toml_get(r, "g"), &d, NULL), 0);
    assert_true(d == -1000.5e20);
    assert_int_equal(toml_double(toml_get(r, "ninf"), &d, NULL), 0);
    assert_true(isinf(d) && d < 0);
    assert_int_equal(toml_double(toml_get(r, "nan"), &d, NULL), 0);
    assert_true(isnan(d));
    assert_int_equal(toml_bool(toml_get(r, "t"), &b, NULL), 0);
    assert_true(b);

    static const struct {
        const char *key, *text;
        enum toml_type type;
    } dt[] = {
        {"odt", "1979-05-27T07:32:00.999999Z", TOML_DATETIME},
        {"odt2", "1979-05-27T00:32:00-07:00", TOML_DATETIME},
        {"ldt", "1979-05-27T07:32:00", TOML_DATETIME_LOCAL},
        {"ld", "2000-02-29", TOML_DATE_LOCAL},
        {"lt", "23:59:60.5", TOML_TIME_LOCAL},
    };
    for (size_t k = 0; k < sizeof(dt) / sizeof(dt[0]); k++) {
        struct toml_node *n = toml_get(r, dt[k].key);
        assert_non_null(n);
        assert_int_equal(toml_type(n), dt[k].type);
        assert_int_equal(toml_datetime(n, &s, NULL), 0);
        assert_string_equal(s, dt[k].text);
    }
    assert_string_equal(toml_type_name(TOML_DATETIME_LOCAL), "datetime-local");
    assert_int_equal(toml_line(toml_get(r, "lt")), 17);
    assert_string_equal(toml_file(toml_get(r, "lt")), "t.toml");
    toml_free(r);
}

static void test_strings(void **state) {
    (void)state;
    struct toml_node *r = parse_ok(
        "esc = \"tab\\t nl\\n q\\\" bs\\\\ e\\u00e9 smile\\U0001F600\"\n"
        "nul = \"a\\u0000b\"\n"
        "lit = 'C:\\Users\\x'\n"
        "ml = \"\"\"\nline one\r\nline \\\n     two\\   \n\n  three\"\"\"\"\n"
        "mll = '''\nraw \\n ''quoted'' '''\n"
        "empty = \"\"\n"
        "'quoted key' = 1\n"
        "\"\" = 2\n");
    const char *s;
    size_t len;
    assert_int_equal(toml_string(toml_get(r, "esc"), &s, &len, NULL), 0);
    assert_string_equal(s, "tab\t nl\n q\" bs\\ e\xc3\xa9 smile\xf0\x9f\x98\x80");
    assert_int_equal(toml_string(toml_get(r, "nul"), &s, &len, NULL), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 4);
    char err[ERR_LEN];
    assert_int_equal(toml_get_string(r, "nul", &s, err), -1);
    assert_string_equal(err, "t.toml:2: 'nul' must not contain a NUL character");
    assert_int_equal(toml_get_string(r, "lit", &s, err), 0);
    assert_string_equal(s, "C:\\Users\\x");
    /* The first newline is trimmed, CRLF becomes LF, a line-ending backslash (even with
     * spaces after it) eats the whitespace and newlines after it, and up to two quotes may
     * come before the closing three. */
    assert_int_equal(toml_get_string(r, "ml", &s, err), 0);
    assert_string_equal(s, "line one\nline twothree\"");
    assert_int_equal(toml_get_string(r, "mll", &s, err), 0);
    assert_string_equal(s, "raw \\n ''quoted'' ");
    assert_int_equal(toml_get_string(r, "empty", &s, err), 0);
    assert_string_equal(s, "");
    assert_non_null(toml_table_get(r, "quoted key"));
    assert_non_null(toml_table_get(r, ""));
    /* The line after a multi-line string is counted from its newlines. */
    assert_int_equal(toml_line(toml_get(r, "mll")), 10);
    assert_int_equal(toml_line(toml_get(r, "quoted key")), 13);
    toml_free(r);
}

static void test_value_errors(void **state) {
    (void)state;
    parse_err("a = 9223372036854775808\n",
              "t.toml:1: invalid integer '9223372036854775808': does not fit in 64 bits");
    parse_err("\n\na = -9223372036854775809\n",
              "t.toml:3: invalid integer '-9223372036854775809': does not fit in 64 bits");
    parse_err("a = 0x8000000000000000\n",
              "t.toml:1: invalid integer '0x8000000000000000': does not fit in 64 bits");
    parse_err("a = 1e400\n", "t.toml:1: invalid float '1e400': out of range for a double");
    parse_err("a = 2001-02-29\n", "t.toml:1: invalid date/time '2001-02-29': day out of range");
    parse_err("a = 07:32\n", "t.toml:1: invalid date/time '07:32': expected HH:MM:SS");
    parse_err("a = \"\\uD800\"\n", "t.toml:1: escape \\uD800 is not a Unicode scalar value");
    parse_err("a = \"\\e\"\n", "t.toml:1: invalid escape sequence '\\e'");
    parse_err("a = \"\"\"\nabc\n", "t.toml:1: unterminated multi-line string");
    parse_err("a = 'x\n", "t.toml:1: unterminated string (line ends before the closing ')");
    parse_err("a = \"\"\"x\"\"\"\"\"\"\n",
              "t.toml:1: too many quotes (6) ending a multi-line string");
    parse_err("a = {b = 1,}\n", "t.toml:1: expected a key, found '}'");
    parse_err("a = [1\n\n", "t.toml:3: unterminated array (opened at line 1)");
    parse_err("a = yes\n", "t.toml:1: invalid value 'yes' (strings need quotes)");
}

static void test_encoding_errors(void **state) {
    (void)state;
    parse_err("a = 1\n\n\nb = \"\xff\"\n", "t.toml:4: invalid UTF-8 byte 0xff");
    parse_err("a = \"\xc0\xaf\"\n", "t.toml:1: overlong UTF-8 encoding of U+002F");
    parse_err("a = \"\xed\xa0\x80\"\n",
              "t.toml:1: UTF-8 encodes U+D800, not a Unicode scalar value");
    parse_err("a = \"\xe2\x82", "t.toml:1: truncated UTF-8 sequence at end of input");
    /* A NUL inside the buffer is a character, not the end. */
    PARSE_ERR_LIT("a = 1\nb = 2\0\nc = 3\n",
                  "t.toml:2: expected a newline after the value, found U+0000");
    PARSE_ERR_LIT("a = \"x\0\"\n", "t.toml:1: control character U+0000 in string");
    parse_err("a = 1\rb = 2\n", "t.toml:1: expected a newline after the value, found U+000D");
    parse_err("# c\r\n# d\re\n", "t.toml:2: carriage return without line feed in comment");
    /* CRLF counts as one line; a leading BOM is skipped. */
    parse_err("\xef\xbb\xbf"
              "a = 1\r\nb = 2\r\na = 3\r\n",
              "t.toml:3: duplicate key 'a' in the root table (already set at line 1)");
    struct toml_node *r = NULL;
    char err[ERR_LEN];
    assert_int_equal(toml_parse("x = ?", 5, NULL, &r, err), -1);
    assert_string_equal(err, "<input>:1: expected a value, found '?'");
    assert_int_equal(toml_parse("", 0, NULL, &r, err), 0);
    assert_int_equal(toml_len(r), 0);
    toml_free(r);
}

/* The spec's rules on defining tables, each case checked both ways. */
static void test_table_rules(void **state) {
    (void)state;
    parse_err("[server]\nhost = \"h\"\nport = 1\nport = 2\n",
              "t.toml:4: duplicate key 'port' in table [server] (already set at line 3)");
    parse_err("[a]\nx = 1\n\n[a]\n", "t.toml:4: table [a] defined twice (first at line 1)");
    parse_err("a = {b = 1}\n[a.c]\n",
              "t.toml:2: cannot define [a.c]: 'a' is a table given inline, closed (line 1)");
    parse_err("a = {b = 1}\na.c = 2\n",
              "t.toml:2: cannot set key 'a.c' in the root table: 'a' is an inline table, closed "
              "at line 1");
    parse_err("a = {b = {c = 1}, b.d = 2}\n",
              "t.toml:1: cannot set key 'b.d' in inline table: 'b' is an inline table, closed at "
              "line 1");
    parse_err("a = [1]\n[[a]]\n",
              "t.toml:2: cannot append to [[a]]: it is already a static array at line 1");
    parse_err("[[a]]\n[a]\n", "t.toml:2: cannot define table [a]: it is already an array (line 1)");
    parse_err("[a.b]\n[[a]]\n",
              "t.toml:2: cannot append to [[a]]: it is already a table at line 1");
    parse_err("a.b = 1\n[a]\n", "t.toml:2: table [a] defined twice (first at line 1)");
    parse_err("[fruit]\napple.color = 1\n[fruit.apple]\n",
              "t.toml:3: table [fruit.apple] defined twice (first at line 2)");
    parse_err("[a.b]\n[a]\nb.c = 1\n",
              "t.toml:3: cannot set key 'b.c' in table [a]: 'b' is a table already defined at "
              "line 1");
    parse_err("a = 1\na.b = 2\n",
              "t.toml:2: cannot set key 'a.b' in the root table: 'a' is an integer at line 1");
    parse_err("a = 1\n[a]\n",
              "t.toml:2: cannot define table [a]: it is already an integer (line 1)");
    parse_err("[a]\nb = 1\n[a.b.c]\n",
              "t.toml:3: cannot define [a.b.c]: 'a.b' is an integer (line 2)");

    /* And what the spec allows. */
    struct toml_node *r = parse_ok("x.y.z = 1\n" /* dotted keys make x and x.y */
                                   "x.y.w = 2\n" /* ...which this section may extend */
                                   "[x.y.v]\n"   /* a sub-table of a dotted table */
                                   "[a.b.c]\n"
                                   "[a]\n" /* implicit a, defined later */
                                   "d.e = 1\n"
                                   "[fruit]\n"
                                   "apple.color = 'red'\n"
                                   "[fruit.apple.texture]\n"
                                   "smooth = true\n"
                                   "[[arr]]\n"
                                   "n = 1\n"
                                   "[arr.sub]\n" /* goes into the latest element */
                                   "m = 1\n"
                                   "[[arr]]\n"
                                   "[[arr.sub2]]\n"
                                   "t = {a.b = 1, a.c = 2}\n");
    int64_t v;
    char err[ERR_LEN];
    assert_int_equal(toml_get_int(r, "x.y.w", &v, err), 0);
    assert_int_equal(v, 2);
    assert_non_null(toml_get(r, "x.y.v"));
    assert_int_equal(toml_get_int(r, "a.d.e", &v, err), 0);
    assert_non_null(toml_get(r, "a.b.c"));
    assert_int_equal(toml_line(toml_get(r, "a")), 5);
    assert_non_null(toml_get(r, "fruit.apple.texture.smooth"));
    struct toml_node *arr = toml_get(r, "arr");
    assert_int_equal(toml_len(arr), 2);
    assert_int_equal(toml_get_int(toml_item(arr, 0), "sub.m", &v, err), 0);
    assert_int_equal(toml_len(toml_get(toml_item(arr, 1), "sub2")), 1);
    assert_int_equal(toml_get_int(r, "t.a.c", &v, err), 1); /* t is at arr[1].sub2[0] */
    assert_int_equal(
        toml_get_int(toml_item(toml_get(toml_item(arr, 1), "sub2"), 0), "t.a.c", &v, err), 0);
    assert_int_equal(v, 2);
    toml_free(r);
}

static void test_lookup_and_iteration(void **state) {
    (void)state;
    struct toml_node *r = parse_ok("title = \"tpd\"\n"
                                   "\"dotted.key\" = 3\n"
                                   "[server]\n"
                                   "socket = \"/run/tpd.sock\"\n"
                                   "port = 8080\n"
                                   "[model.sampling]\n"
                                   "temperature = 0.7\n"
                                   "top_k = 40\n"
                                   "[[workers]]\n"
                                   "rank = 0\n"
                                   "[[workers]]\n"
                                   "rank = 1\n"
                                   "gpus = [0, 1, \"x\"]\n");
    char err[ERR_LEN] = "";
    const char *s;
    int64_t v = -5;
    double d;
    bool b = true;

    struct toml_node *sock = toml_get(r, "server.socket");
    assert_non_null(sock);
    assert_int_equal(toml_line(sock), 4);
    assert_int_equal(toml_get_string(r, "server.socket", &s, err), 0);
    assert_string_equal(s, "/run/tpd.sock");
    assert_null(toml_get(r, "missing.x"));
    assert_null(toml_get(r, "title.x"));
    assert_null(toml_get(r, "server."));
    assert_null(toml_get(r, "dotted.key"));
    assert_non_null(toml_table_get(r, "dotted.key"));

    /* Path reads over defaults: found, absent (untouched), wrong type, path through a value. */
    assert_int_equal(toml_get_int(r, "server.port", &v, err), 0);
    assert_int_equal(v, 8080);
    v = -5;
    assert_int_equal(toml_get_int(r, "server.backlog", &v, err), 1);
    assert_int_equal(v, -5);
    assert_int_equal(toml_get_bool(r, "nothing.here", &b, err), 1);
    assert_true(b);
    assert_int_equal(toml_get_int(r, "server.socket", &v, err), -1);
    assert_string_equal(err, "t.toml:4: 'server.socket' must be an integer, not a string");
    assert_int_equal(toml_get_int(r, "title.x", &v, err), -1);
    assert_string_equal(err, "t.toml:1: 'title' must be a table, not a string");
    assert_int_equal(toml_get_double(r, "model.sampling.top_k", &d, err), 0); /* ints widen */
    assert_true(d == 40.0);
    assert_int_equal(toml_get_double(r, "model.sampling.temperature", &d, err), 0);
    assert_true(d == 0.7);
    assert_int_equal(toml_get_bool(r, "server.port", &b, err), -1);
    assert_string_equal(err, "t.toml:5: 'server.port' must be a boolean, not an integer");
    assert_int_equal(toml_int(toml_get(r, "model.sampling.temperature"), &v, err), -1);
    assert_string_equal(err, "t.toml:7: expected an integer, found a float");
    assert_int_equal(toml_get_string(r, "model", &s, err), -1);
    assert_string_equal(err, "t.toml:6: 'model' must be a string, not a table");

    /* Keys in definition order; arrays of tables keep each element's header line. */
    static const char *keys[] = {"title", "dotted.key", "server", "model", "workers"};
    assert_int_equal(toml_len(r), 5);
    for (size_t i = 0; i < 5; i++) {
        size_t len;
        assert_string_equal(toml_key(r, i, &len), keys[i]);
        assert_int_equal(len, strlen(keys[i]));
        assert_ptr_equal(toml_value(r, i), toml_table_get(r, keys[i]));
    }
    assert_null(toml_key(r, 5, NULL));
    assert_null(toml_value(r, 5));
    struct toml_node *w = toml_get(r, "workers");
    assert_int_equal(toml_type(w), TOML_ARRAY);
    assert_int_equal(toml_len(w), 2);
    assert_int_equal(toml_line(toml_item(w, 0)), 9);
    assert_int_equal(toml_line(toml_item(w, 1)), 11);
    assert_null(toml_item(w, 2));
    assert_null(toml_item(r, 0));
    struct toml_node *g = toml_get(toml_item(w, 1), "gpus");
    assert_int_equal(toml_len(g), 3); /* mixed types are allowed in 1.0 */
    assert_int_equal(toml_type(toml_item(g, 2)), TOML_STRING);
    assert_int_equal(toml_len(toml_item(g, 0)), 0);
    toml_free(r);
}

static char *repeat(const char *a, size_t n, const char *mid, const char *b) {
    size_t la = strlen(a), lm = strlen(mid), lb = strlen(b);
    char *s = malloc(n * (la + lb) + lm + 1), *o = s;
    assert_non_null(s);
    for (size_t i = 0; i < n; i++, o += la) memcpy(o, a, la);
    memcpy(o, mid, lm);
    o += lm;
    for (size_t i = 0; i < n; i++, o += lb) memcpy(o, b, lb);
    *o = '\0';
    return s;
}

static void test_limits(void **state) {
    (void)state;
    struct toml_node *r;
    char err[ERR_LEN];
    /* TOML_MAX_DEPTH nested arrays fit (the key's value is level 1), one more does not. */
    char *ok = repeat("[", TOML_MAX_DEPTH, "1", "]");
    char *doc = malloc(strlen(ok) + 8);
    sprintf(doc, "a = %s\n", ok);
    r = parse_ok(doc);
    toml_free(r);
    free(ok);
    free(doc);
    char *deep = repeat("[", TOML_MAX_DEPTH + 1, "1", "]");
    doc = malloc(strlen(deep) + 8);
    sprintf(doc, "a = %s\n", deep);
    parse_err(doc, "t.toml:1: values nested deeper than 256 levels");
    free(deep);
    free(doc);
    /* A million open brackets or braces: refused at the limit, no stack overflow. */
    size_t big = 1000000;
    doc = malloc(big + 8);
    memcpy(doc, "a = ", 4);
    memset(doc + 4, '[', big);
    assert_int_equal(toml_parse(doc, big + 4, "t.toml", &r, err), -1);
    assert_string_equal(err, "t.toml:1: values nested deeper than 256 levels");
    memset(doc + 4, '{', big);
    assert_int_equal(toml_parse(doc, big + 4, "t.toml", &r, err), -1);
    free(doc);
    /* Keys and headers with too many parts. */
    char *hdr = repeat("a.", 300, "a", "");
    doc = malloc(strlen(hdr) + 8);
    sprintf(doc, "[%s]\n", hdr);
    parse_err(doc, "t.toml:1: key has more than 256 dotted parts");
    sprintf(doc, "%s=1\n", hdr);
    parse_err(doc, "t.toml:1: key has more than 256 dotted parts");
    free(hdr);
    free(doc);
    size_t n = 200000;
    char *kv = malloc(n * 24 + 1), *o = kv;
    for (size_t i = 0; i < n; i++) o += sprintf(o, "key%zu = %zu\n", i, i);
    assert_int_equal(toml_parse(kv, (size_t)(o - kv), "t.toml", &r, err), 0);
    assert_int_equal(toml_len(r), n);
    int64_t v;
    assert_int_equal(toml_get_int(r, "key199999", &v, err), 0);
    assert_int_equal(v, 199999);
    assert_int_equal(toml_get_int(r, "key7", &v, err), 0);
    assert_int_equal(v, 7);
    assert_int_equal(toml_get_int(r, "key200000", &v, err), 1);
    toml_free(r);
    /* One more is a duplicate, found through the hash index. */
    o += sprintf(o, "key123456 = 0\n");
    assert_int_equal(toml_parse(kv, (size_t)(o - kv), "t.toml", &r, err), -1);
    assert_string_equal(
        err,
        "t.toml:200001: duplicate key 'key123456' in the root table (already set at line 123457)");
    free(kv);
    assert_int_equal(toml_parse("", (size_t)TOML_MAX_INPUT + 1, "t.toml", &r, err), -1);
    assert_null(r);
}

/* Every header on its own line nests one level deeper through [[a]] arrays. */
static void test_aot_depth(void **state) {
    (void)state;
    size_t levels = TOML_MAX_DEPTH; /* each [[x]] level adds an array and a table */
    char *doc = malloc(levels * (levels * 2 + 8)), *o = doc;
    for (size_t i = 1; i <= levels; i++) {
        o += sprintf(o, "[[");
        for (size_t j = 0; j < i; j++) o += sprintf(o, j ? ".a" : "a");
        o += sprintf(o, "]]\n");
    }
    struct toml_node *r;
    char err[ERR_LEN];
    assert_int_equal(toml_parse(doc, (size_t)(o - doc), "t.toml", &r, err), -1);
    assert_string_equal(err, "t.toml:129: tables nested deeper than 256 levels");
    free(doc);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* An error must read "f.toml:LINE: message". */
static void check_parse(const char *buf, size_t len) {
    struct toml_node *r = (struct toml_node *)1;
    char err[ERR_LEN];
    int rc = toml_parse(buf, len, "f.toml", &r, err);
    if (rc == 0) {
        assert_non_null(r);
        toml_free(r);
        return;
    }
    assert_int_equal(rc, -1);
    assert_null(r);
    const char *p = err;
    if (strncmp(p, "f.toml:", 7) != 0) fail_msg("bad error: %s", err);
    p += 7;
    if (!(*p >= '1' && *p <= '9')) fail_msg("bad error: %s", err);
    while (*p >= '0' && *p <= '9') p++;
    if (strncmp(p, ": ", 2) != 0 || !p[2]) fail_msg("bad error: %s", err);
}

static void test_corpus_mutations(void **state) {
    (void)state;
    DIR *top = opendir(CORPUS);
    if (!top) skip();
    closedir(top);
    static const char *dirs[] = {"",          "/array",  "/bool",         "/comment",
                                 "/datetime", "/float",  "/inline-table", "/integer",
                                 "/key",      "/string", "/table"};
    static const unsigned char subst[] = {0,   '\n', '\r', '"', '\'', '[',  ']', '{',
                                          '=', '.',  ',',  '#', '\\', 0xff, 0xc3};
    size_t files = 0, parses = 0;
    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
        char dpath[512];
        snprintf(dpath, sizeof(dpath), "%s%s", CORPUS, dirs[d]);
        DIR *dir = opendir(dpath);
        if (!dir) continue;
        for (struct dirent *e; (e = readdir(dir));) {
            if (!ends_with(e->d_name, ".toml")) continue;
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s", dpath, e->d_name);
            FILE *f = fopen(path, "rb");
            assert_non_null(f);
            char buf[8192];
            size_t len = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            files++;
            struct toml_node *r;
            char err[ERR_LEN];
            /* Whole file parses (but escape-esc, TOML 1.1's \e); every prefix parses or is
             * refused cleanly. */
            if (strcmp(e->d_name, "escape-esc.toml") != 0) {
                if (toml_parse(buf, len, "f.toml", &r, err) != 0) fail_msg("%s: %s", path, err);
                toml_free(r);
            }
            for (size_t n = 0; n < len; n++, parses++) check_parse(buf, n);
            /* Each byte swapped for a few troublesome ones. */
            for (size_t i = 0; i < len; i++) {
                unsigned char keep = (unsigned char)buf[i];
                for (size_t k = 0; k < sizeof(subst); k++, parses++) {
                    buf[i] = (char)subst[k];
                    check_parse(buf, len);
                }
                buf[i] = (char)keep;
            }
        }
        closedir(dir);
    }
    assert_true(files >= 90);
    print_message("corpus mutations: %zu files, %zu parses\n", files, parses);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),          cmocka_unit_test(test_strings),
        cmocka_unit_test(test_value_errors),     cmocka_unit_test(test_encoding_errors),
        cmocka_unit_test(test_table_rules),      cmocka_unit_test(test_lookup_and_iteration),
        cmocka_unit_test(test_limits),           cmocka_unit_test(test_aot_depth),
        cmocka_unit_test(test_corpus_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

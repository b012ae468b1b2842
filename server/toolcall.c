#include "toolcall.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../grammar/grammar.h"
#include "../util/err.h"
#include "../util/fatal.h"

#define MAX_DEPTH 512      /* JSON nesting inside one call */
#define MAX_NAME_BYTES 256 /* MISTRAL [TOOL_CALLS]NAME[ARGS]: longest NAME part */

/* ---- formats ---- */

static const char *const hermes_markers[] = {"<tool_call>", "</tool_call>", NULL};
static const char *const llama3_markers[] = {"<|python_tag|>", NULL};
static const char *const mistral_markers[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL};
static const char *const no_markers[] = {NULL};

enum tool_format toolcall_detect(const char *src) {
    if (!src) return TOOL_FORMAT_NONE;
    /* other syntaxes that share these markers: Qwen3-Coder's and Nemotron's <function=...>,
     * GLM's <arg_key>, functionary's >>>name */
    int other = strstr(src, "<function=") || strstr(src, "<arg_key>") || strstr(src, ">>>");
    if (strstr(src, "[TOOL_CALLS]")) return TOOL_FORMAT_MISTRAL;
    if (other) return TOOL_FORMAT_NONE;
    if (strstr(src, "<tool_call>") && strstr(src, "\"arguments\"")) return TOOL_FORMAT_HERMES;
    if ((strstr(src, "<|python_tag|>") || strstr(src, "<|start_header_id|>")) &&
        strstr(src, "\"parameters\""))
        return TOOL_FORMAT_LLAMA3;
    return TOOL_FORMAT_NONE;
}

static const char *const format_names[] = {"none", "hermes", "llama3", "mistral"};

const char *toolcall_format_name(enum tool_format f) {
    return (unsigned)f < sizeof format_names / sizeof *format_names ? format_names[f] : "none";
}

int toolcall_format_parse(const char *name) {
    for (unsigned i = 0; i < sizeof format_names / sizeof *format_names; i++)
        if (!strcmp(name, format_names[i])) return (int)i;
    return -1;
}

const char *const *toolcall_markers(enum tool_format f) {
    switch (f) {
    case TOOL_FORMAT_HERMES: return hermes_markers;
    case TOOL_FORMAT_LLAMA3: return llama3_markers;
    case TOOL_FORMAT_MISTRAL: return mistral_markers;
    default: return no_markers;
    }
}

char *toolcall_prefix(enum tool_format f, const char *name) {
    static const char *const open[] = {NULL, "<tool_call>\n{\"name\": \"", "{\"name\": \"",
                                       "[TOOL_CALLS][{\"name\": \""};
    static const char *const args[] = {
        NULL, "\", \"arguments\": ", "\", \"parameters\": ", "\", \"arguments\": "};
    if ((unsigned)f >= sizeof open / sizeof *open || !open[f]) return NULL;
    struct sbuf b = {0};
    sbuf_adds(&b, open[f]);
    if (name) {
        sbuf_adds(&b, name);
        sbuf_adds(&b, args[f]);
    }
    return b.p;
}

/* A GBNF string literal of s (names are [A-Za-z0-9_-], markers and JSON punctuation). */
static void gbnf_lit(struct sbuf *b, const char *s) {
    sbuf_adds(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') sbuf_addf(b, "\\%c", *s);
        else if (*s == '\n') sbuf_adds(b, "\\n");
        else sbuf_add(b, s, 1);
    }
    sbuf_adds(b, "\"");
}

int toolcall_grammar(enum tool_format f, const char *const *names, const char *const *params, int n,
                     int named, int parallel, struct sbuf *out, int *bad, char *err) {
    /* per format: between the name and the arguments; after the arguments; between calls
     * (the next call's prefix up to its name); after the last call */
    static const char *const mid[] = {
        NULL, "\", \"arguments\": ", "\", \"parameters\": ", "\", \"arguments\": "};
    static const char *const close[] = {NULL, "}\n</tool_call>", "}", "}"};
    static const char *const next[] = {NULL, "\n<tool_call>\n{\"name\": \"", "; {\"name\": \"",
                                       ", {\"name\": \""};
    static const char *const last[] = {NULL, "", "", "]"};
    *bad = -1;
    if ((unsigned)f >= sizeof mid / sizeof *mid || !mid[f])
        return err_set(err, "the model has no tool-call format");
    char rule[48];
    for (int i = 0; i < n; i++) {
        if (named >= 0 && i != named) continue;
        snprintf(rule, sizeof rule, "fn%d-args", i);
        if (!params[i]) {
            sbuf_addf(out, "%s ::= \"{}\"\n", rule);
        } else if (grammar_gbnf_from_json_schema(params[i], strlen(params[i]), rule, 0, out, err)) {
            *bad = i;
            return -1;
        }
    }
    if (named >= 0) { /* the prefix wrote the name: the arguments follow */
        sbuf_addf(out, "root ::= fn%d-args ", named);
        gbnf_lit(out, close[f]);
        if (last[f][0]) sbuf_adds(out, " "), gbnf_lit(out, last[f]);
        sbuf_adds(out, "\n");
        return 0;
    }
    sbuf_adds(out, "call ::= ");
    for (int i = 0; i < n; i++) {
        struct sbuf lit = {0};
        sbuf_adds(&lit, names[i]);
        sbuf_adds(&lit, mid[f]);
        sbuf_adds(out, i ? " | " : "");
        gbnf_lit(out, lit.p);
        sbuf_addf(out, " fn%d-args ", i);
        gbnf_lit(out, close[f]);
        sbuf_free(&lit);
    }
    sbuf_adds(out, "\nroot ::= call");
    /* where the next call starts with a newline (Hermes), a model that writes that newline
     * after its last call may still end there: the parser drops it, and the closer never
     * has to force a whole extra call out of it */
    int nl = next[f][0] == '\n';
    if (parallel)
        sbuf_adds(out, nl ? " (\"\\n\" " : " ("), gbnf_lit(out, next[f] + nl),
            sbuf_adds(out, " call)*");
    if (parallel && nl) sbuf_adds(out, " \"\\n\"?");
    if (last[f][0]) sbuf_adds(out, " "), gbnf_lit(out, last[f]);
    sbuf_adds(out, "\n");
    return 0;
}

void toolcall_new_id(enum tool_format f, char *id) {
    static const char an[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static atomic_ullong ctr;
    uint8_t r[24];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)time(NULL) ^ (atomic_fetch_add(&ctr, 1) * 0x9E3779B97F4A7C15ull);
        for (size_t i = 0; i < sizeof r; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (uint8_t)(x >> 56);
        }
    }
    int n = f == TOOL_FORMAT_MISTRAL ? 9 : 24;
    char *o = id;
    if (f != TOOL_FORMAT_MISTRAL) o += sprintf(o, "call_");
    for (int i = 0; i < n; i++) o[i] = an[r[i] % (sizeof an - 1)];
    o[n] = 0;
}

/* ---- JSON spans: the exact text of a member's value, as the model wrote it ---- */

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* End of the JSON value starting at s[i] (text already known valid by cJSON). */
static size_t skip_value(const char *s, size_t n, size_t i) {
    int depth = 0, in_str = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') {
                in_str = 0;
                if (!depth) return i + 1;
            }
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) return depth < 0 ? i : i + 1;
        } else if (!depth && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
            return i;
        }
    }
    return n;
}

/* The span of member key's value in the object s[0..n); 0 found, -1 not. */
static int member_span(const char *s, size_t n, const char *key, size_t *off, size_t *len) {
    size_t i = skip_ws(s, n, 0), kl = strlen(key);
    if (i >= n || s[i] != '{') return -1;
    i++;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n || s[i] != '"') return -1;
        size_t k0 = i + 1, k1 = skip_value(s, n, i) - 1;
        i = skip_ws(s, n, k1 + 1);
        if (i >= n || s[i] != ':') return -1;
        size_t v0 = skip_ws(s, n, i + 1), v1 = skip_value(s, n, v0);
        if (k1 - k0 == kl && !memcmp(s + k0, key, kl)) {
            *off = v0;
            *len = v1 - v0;
            return 0;
        }
        i = skip_ws(s, n, v1);
        if (i >= n || s[i] != ',') return -1;
        i++;
    }
}

/* ---- one call's JSON -> a tool_call ---- */

static int known_name(const struct toolcall_parser *p, const char *name) {
    for (int i = 0; i < p->n_names; i++)
        if (!strcmp(p->names[i], name)) return 1;
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* cJSON of s[0..n) when it is exactly one JSON value (surrounding blanks allowed). */
static cJSON *parse_exact(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!j) return NULL;
    size_t at = (size_t)(end - s);
    if (skip_ws(s, n, at) != n) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* arguments: a JSON object (its text kept as written), a string holding one (some models
 * encode it twice), or absent ({} for a function without parameters). */
static char *arguments_text(const char *s, size_t n, const cJSON *obj, const char *key) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a) return NULL;
    if (cJSON_IsObject(a)) {
        size_t off, len;
        if (member_span(s, n, key, &off, &len)) return NULL;
        return dup_n(s + off, len);
    }
    if (cJSON_IsString(a)) {
        cJSON *inner = parse_exact(a->valuestring, strlen(a->valuestring));
        int ok = cJSON_IsObject(inner);
        cJSON_Delete(inner);
        return ok ? xstrdup(a->valuestring) : NULL;
    }
    return NULL;
}

/* A call from the JSON object s[0..n): {"name": N, "arguments"|"parameters": {...}}. name
 * given (MISTRAL's NAME[ARGS]{...}): s is the arguments object itself. 0, or -1. */
static int call_from_json(const struct toolcall_parser *p, const char *s, size_t n,
                          const char *name, struct tool_call *out) {
    cJSON *j = parse_exact(s, n);
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(j)) goto done;
    if (name) {
        if (!known_name(p, name)) goto done;
        size_t i = skip_ws(s, n, 0), e = n;
        while (e > i &&
               (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n' || s[e - 1] == '\r'))
            e--;
        out->name = xstrdup(name);
        out->arguments = dup_n(s + i, e - i);
        rc = 0;
        goto done;
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    if (!cJSON_IsString(nm) || !known_name(p, nm->valuestring)) goto done;
    int has_args = cJSON_HasObjectItem(j, "arguments"),
        has_params = cJSON_HasObjectItem(j, "parameters");
    if (has_args && has_params) goto done;
    char *args = has_args     ? arguments_text(s, n, j, "arguments")
                 : has_params ? arguments_text(s, n, j, "parameters")
                              : xstrdup("{}");
    if (!args) goto done;
    out->name = xstrdup(nm->valuestring);
    out->arguments = args;
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

static void call_free(struct tool_call *c) {
    free(c->name);
    free(c->arguments);
}

/* ---- the parser ---- */

void toolcall_parser_init(struct toolcall_parser *p, enum tool_format f, const char *const *names,
                          int n_names, int parallel) {
    memset(p, 0, sizeof *p);
    p->f = f;
    p->names = names;
    p->n_names = n_names;
    p->parallel = parallel;
    p->opened = 1;
}

void toolcall_parser_free(struct toolcall_parser *p) {
    for (int i = 0; i < p->n_calls; i++) call_free(&p->calls[i]);
    free(p->calls);
    sbuf_free(&p->pend);
    sbuf_free(&p->body);
    memset(p, 0, sizeof *p);
}

static const char *start_marker(enum tool_format f) {
    return f == TOOL_FORMAT_NONE ? NULL : toolcall_markers(f)[0];
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Blank content: dropped after a call, and (LLAMA3) what may come before a bare '{' call. */
static int blank(const struct toolcall_parser *p, char c) {
    return is_ws(c) || (p->f == TOOL_FORMAT_LLAMA3 && p->after_call && c == ';');
}

static int all_blank(const struct toolcall_parser *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!blank(p, s[i])) return 0;
    return 1;
}

static void cut_front(struct sbuf *b, size_t k) {
    memmove(b->p, b->p + k, b->len - k);
    b->len -= k;
    b->p[b->len] = 0;
}

static void release(struct toolcall_parser *p, const char *s, size_t n, struct sbuf *content) {
    if (!n) return;
    if (p->after_call && all_blank(p, s, n)) return;
    sbuf_add(content, s, n);
    if (!all_blank(p, s, n)) p->opened = 0;
}

static void add_call(struct toolcall_parser *p, struct tool_call *c) {
    if (!p->parallel && p->n_calls >= 1) {
        call_free(c);
        return;
    }
    if (p->n_calls == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4;
        p->calls = xrealloc(p->calls, sizeof *p->calls * (size_t)p->cap);
    }
    toolcall_new_id(p->f, c->id);
    p->calls[p->n_calls++] = *c;
}

/* Text that is content whatever comes next (a refused call, verbatim). */
static void emit(struct toolcall_parser *p, const char *s, size_t n, struct sbuf *content) {
    sbuf_add(content, s, n);
    if (!all_blank(p, s, n)) p->opened = 0;
}

/* The call body[0..call_end) is over; its JSON is body[json_off..json_end). Accepted, it
 * joins calls[]; refused, its whole text is content. What followed goes back to pend. */
static void finish_call(struct toolcall_parser *p, size_t json_end, size_t call_end,
                        struct sbuf *content) {
    const char *s = p->body.p + p->json_off;
    size_t n = json_end - p->json_off;
    struct tool_call c[64];
    int nc = 0, ok = 1;
    size_t i = skip_ws(s, n, 0);
    if (p->f == TOOL_FORMAT_MISTRAL && p->json_off > strlen("[TOOL_CALLS]")) {
        /* [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}: the name sits between the markers */
        const char *m = p->body.p + strlen("[TOOL_CALLS]");
        size_t ml = p->json_off - strlen("[TOOL_CALLS]") - strlen("[ARGS]");
        const char *cid = memmem(m, ml, "[CALL_ID]", 9);
        if (cid) ml = (size_t)(cid - m);
        while (ml && is_ws(m[0])) m++, ml--;
        while (ml && is_ws(m[ml - 1])) ml--;
        char *name = dup_n(m, ml);
        ok = call_from_json(p, s, n, name, &c[nc]) == 0;
        nc += ok;
        free(name);
    } else if (i < n && s[i] == '[') {
        cJSON *arr = parse_exact(s, n);
        ok = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0 &&
             cJSON_GetArraySize(arr) <= (int)(sizeof c / sizeof *c);
        cJSON_Delete(arr);
        for (i++; ok;) {
            size_t v0 = skip_ws(s, n, i), v1 = skip_value(s, n, v0);
            if (call_from_json(p, s + v0, v1 - v0, NULL, &c[nc])) ok = 0;
            else nc++;
            i = skip_ws(s, n, v1);
            if (i >= n || s[i] != ',') break;
            i++;
        }
    } else {
        ok = call_from_json(p, s, n, NULL, &c[nc]) == 0;
        nc += ok;
    }
    if (ok) {
        for (int k = 0; k < nc; k++) add_call(p, &c[k]);
        p->after_call = 1;
        p->opened = 1;
    } else {
        for (int k = 0; k < nc; k++) call_free(&c[k]);
        emit(p, p->body.p, call_end, content);
        p->opened = 0;
    }
    struct sbuf rest = {0};
    sbuf_add(&rest, p->body.p + call_end, p->body.len - call_end);
    sbuf_add(&rest, p->pend.p ? p->pend.p : "", p->pend.len);
    sbuf_free(&p->pend);
    p->pend = rest;
    p->body.len = 0;
    p->in_call = 0;
}

static void begin_call(struct toolcall_parser *p, size_t from, size_t json_off) {
    p->in_call = 1;
    p->body.len = 0;
    sbuf_add(&p->body, p->pend.p + from, p->pend.len - from);
    cut_front(&p->pend, p->pend.len);
    p->json_off = json_off;
    p->scan = json_off;
    p->depth = p->in_str = p->esc = p->json_start = 0;
}

/* Content: releases what cannot begin a call; 1 when a call began. */
static int scan_content(struct toolcall_parser *p, struct sbuf *content) {
    const char *s = p->pend.p, *m = start_marker(p->f);
    size_t n = p->pend.len, ml = m ? strlen(m) : 0;
    if (!n) return 0;
    if (!m) {
        release(p, s, n, content);
        cut_front(&p->pend, n);
        return 0;
    }
    if (p->f == TOOL_FORMAT_LLAMA3 && p->opened) {
        size_t b = 0;
        while (b < n && blank(p, s[b])) b++;
        if (b == n) return 0; /* only blanks so far: a call may follow */
        if (s[b] == '{') {
            /* the blanks travel with the call: content again if it is not one */
            begin_call(p, 0, b);
            return 1;
        }
        if (s[b] != '<') p->opened = 0; /* '<' may be <|python_tag|> */
    }
    const char *k = memmem(s, n, m, ml);
    if (k) {
        size_t at = (size_t)(k - s);
        release(p, s, at, content);
        cut_front(&p->pend, at);
        begin_call(p, 0, ml);
        return 1;
    }
    /* hold the longest tail that is a start of the marker */
    size_t hold = 0;
    for (size_t h = ml - 1 < n ? ml - 1 : n; h > 0 && !hold; h--)
        if (!memcmp(s + n - h, m, h)) hold = h;
    if (p->after_call && all_blank(p, s, n - hold))
        return 0; /* blank: dropped if a call or the end follows */
    if (p->f == TOOL_FORMAT_LLAMA3 && p->opened && all_blank(p, s, n - hold)) return 0;
    release(p, s, n - hold, content);
    cut_front(&p->pend, n - hold);
    return 0;
}

/* MISTRAL [TOOL_CALLS]NAME[ARGS]: 1 once [ARGS] is found (json_off moved past it), 0 while
 * waiting, -1 when this is not such a call. */
static int find_args_marker(struct toolcall_parser *p) {
    size_t ml = strlen("[TOOL_CALLS]");
    const char *s = p->body.p + ml;
    size_t n = p->body.len - ml;
    const char *a = memmem(s, n, "[ARGS]", 6);
    for (const char *c = s; c < (a ? a : s + n); c++)
        if (*c == '{' || *c == '"' || *c == '\n') return -1;
    if (!a) return n > MAX_NAME_BYTES ? -1 : 0;
    p->json_off = p->scan = (size_t)(a - p->body.p) + 6;
    return 1;
}

/* Inside a call: 1 when it ended (finished), 0 while it goes on. */
static int scan_call(struct toolcall_parser *p, struct sbuf *content) {
    const char *s = p->body.p;
    size_t n = p->body.len;
    if (p->f == TOOL_FORMAT_HERMES) {
        static const char end[] = "</tool_call>";
        size_t el = sizeof end - 1, from = p->scan > p->json_off + el ? p->scan - el : p->json_off;
        const char *e = n > from ? memmem(s + from, n - from, end, el) : NULL;
        p->scan = n;
        if (!e) return 0;
        finish_call(p, (size_t)(e - s), (size_t)(e - s) + el, content);
        return 1;
    }
    if (p->f == TOOL_FORMAT_MISTRAL && !p->json_start && p->json_off == strlen("[TOOL_CALLS]")) {
        size_t i = skip_ws(s, n, p->json_off);
        if (i >= n) return 0;
        if (s[i] != '[' && s[i] != '{') {
            int r = find_args_marker(p);
            if (r == 0) return 0;
            if (r < 0) goto not_json;
        }
    }
    for (size_t i = p->scan; i < n; i++) {
        char c = s[i];
        if (!p->json_start) {
            if (is_ws(c)) continue;
            if (c != '{' && !(c == '[' && p->f == TOOL_FORMAT_MISTRAL)) goto not_json;
            p->json_start = 1;
        }
        if (p->in_str) {
            if (p->esc) p->esc = 0;
            else if (c == '\\') p->esc = 1;
            else if (c == '"') p->in_str = 0;
            continue;
        }
        if (c == '"') p->in_str = 1;
        else if (c == '{' || c == '[') {
            if (++p->depth > MAX_DEPTH) goto not_json;
        } else if ((c == '}' || c == ']') && --p->depth == 0) {
            finish_call(p, i + 1, i + 1, content);
            return 1;
        }
    }
    p->scan = n;
    return 0;
not_json:
    /* the marker is content; what follows it is scanned as content again */
    emit(p, s, p->json_off, content);
    p->opened = 0;
    {
        struct sbuf rest = {0};
        sbuf_add(&rest, s + p->json_off, n - p->json_off);
        sbuf_add(&rest, p->pend.p ? p->pend.p : "", p->pend.len);
        sbuf_free(&p->pend);
        p->pend = rest;
    }
    p->body.len = 0;
    p->in_call = 0;
    return 1;
}

void toolcall_feed(struct toolcall_parser *p, const char *s, size_t n, struct sbuf *content) {
    if (!n) return;
    if (p->in_call) sbuf_add(&p->body, s, n);
    else sbuf_add(&p->pend, s, n);
    for (;;) {
        if (p->in_call) {
            if (!scan_call(p, content)) return;
        } else {
            if (!scan_content(p, content)) return;
        }
    }
}

void toolcall_finish(struct toolcall_parser *p, struct sbuf *content) {
    for (;;) {
        if (p->in_call) {
            if (scan_call(p, content)) continue;
            /* the output ended inside a call: a HERMES call whose closing tag never came
             * (the model stopped right after the JSON) counts when its JSON is whole; any
             * other open call is content */
            size_t end = p->body.len;
            while (end > p->json_off && is_ws(p->body.p[end - 1])) end--;
            if (p->f == TOOL_FORMAT_HERMES) {
                finish_call(p, end, p->body.len, content);
            } else {
                emit(p, p->body.p, p->body.len, content);
                p->body.len = 0;
                p->in_call = 0;
            }
            continue;
        }
        if (p->pend.len && scan_content(p, content)) continue;
        break;
    }
    release(p, p->pend.p, p->pend.len, content);
    p->pend.len = 0;
}

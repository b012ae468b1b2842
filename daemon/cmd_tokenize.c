/* tpd tokenize --tokenizer PATH (--text T | --file F) [--no-special] [--no-parse-special]
 * Prints the ids as a JSON array. Special tokens are added as HF's tokenizer.encode(text)
 * adds them unless --no-special; special tokens written in the text are recognized unless
 * --no-parse-special.
 * --chat MESSAGES.json [--add-generation-prompt] [--print-prompt]: renders the model's chat
 * template first (then tokenizes it as apply_chat_template(tokenize=True) does, without
 * adding special tokens), or prints the prompt.
 * For the tests: --batch F (one hex-encoded text per line) prints one JSON object per line
 * with the ids, the decoded text and the streamed text (hex); --render-batch F (no
 * tokenizer; JSON lines {"template", "context"}) prints {"ok", "text"|"error"} lines; a line
 * {"template", "request"} renders a chat request body as the server does (tools included)
 * and also prints the tool-call "format" detected in the template (and, for a forced call,
 * the "grammar" its decoding follows). */
#include "cmd_tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../server/api.h"
#include "../server/toolcall.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/detok.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/hex.h"
#include "../util/sbuf.h"
#include "options.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct sbuf b = {0};
    int bad = sbuf_add_stream(&b, f);
    fclose(f);
    if (bad) {
        sbuf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static void print_ids(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    putchar(']');
}

static void print_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
}

static int run_batch(struct tokenizer *t, const char *path, int flags) {
    size_t len;
    char *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "tokenize: cannot read %s\n", path);
        return 1;
    }
    char err[ERR_LEN];
    char *line = data;
    int rc = 0;
    while (line < data + len) {
        char *nl = memchr(line, '\n', (size_t)(data + len - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(data + len - line);
        size_t n = 0;
        if (ll % 2) rc = 1;
        for (size_t i = 0; !rc && i < ll; i += 2) {
            int hi = hex_digit(line[i]), lo = hex_digit(line[i + 1]);
            if (hi < 0 || lo < 0) rc = 1;
            else line[n++] = (char)(hi * 16 + lo);
        }
        if (rc) {
            fprintf(stderr, "tokenize: bad hex line\n");
            break;
        }
        int32_t *ids;
        size_t nid;
        if (tokenizer_encode(t, line, n, flags, &ids, &nid, err)) {
            fprintf(stderr, "tokenize: %s\n", err);
            rc = 1;
            break;
        }
        char *dec;
        size_t dl;
        if (tokenizer_decode(t, ids, nid, 0, &dec, &dl, err)) {
            fprintf(stderr, "tokenize: %s\n", err);
            free(ids);
            rc = 1;
            break;
        }
        printf("{\"ids\": ");
        print_ids(ids, nid);
        printf(", \"dec\": \"");
        print_hex(dec, dl);
        printf("\", \"stream\": \"");
        struct detok d;
        detok_init(&d, t, 0);
        for (size_t i = 0; i < nid; i++) {
            size_t ol;
            const char *o = detok_push(&d, ids[i], &ol);
            if (o) print_hex(o, ol);
        }
        size_t ol;
        const char *o = detok_flush(&d, &ol);
        if (o) print_hex(o, ol);
        detok_free(&d);
        printf("\"}\n");
        free(dec);
        free(ids);
        line = nl ? nl + 1 : data + len;
    }
    free(data);
    return rc;
}

/* A batch line {"template", "request": a chat request body, "bos_token"?, "eos_token"?}:
 * the prompt the server renders for that request (server/api.c), and the tool-call format
 * it detects in the template. */
static void render_request(const char *src, const cJSON *line, const cJSON *req, cJSON *res) {
    char err[ERR_LEN];
    struct chat_template ct;
    if (chat_template_load(&ct, NULL, src, err)) {
        cJSON_AddBoolToObject(res, "ok", 0);
        cJSON_AddStringToObject(res, "error", err);
        return;
    }
    const char *names[] = {"bos_token", "eos_token"};
    char **dst[] = {&ct.bos, &ct.eos};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(line, names[i]);
        if (cJSON_IsString(v)) {
            free(*dst[i]);
            *dst[i] = xstrdup(v->valuestring);
        }
    }
    struct api_ctx c = {.chat = &ct, .model_name = NULL, .tool_format = toolcall_detect(src)};
    char *body = cJSON_PrintUnformatted(req), *text = NULL;
    size_t tl = 0;
    struct api_error e;
    if (body && api_chat_prompt(&c, body, strlen(body), &text, &tl, &e) == 0) {
        cJSON_AddBoolToObject(res, "ok", 1);
        cJSON_AddStringToObject(res, "text", text);
    } else {
        cJSON_AddBoolToObject(res, "ok", 0);
        cJSON_AddStringToObject(res, "error", body ? e.message : "out of memory");
    }
    cJSON_AddStringToObject(res, "format", toolcall_format_name(c.tool_format));
    /* a forced call: the GBNF its decoding follows after the prompt */
    struct api_tools t;
    if (api_tools_read(req, c.tool_format, &t, &e) == 0 && t.prefix) {
        struct sbuf g = {0};
        int bad;
        if (toolcall_grammar(t.format, (const char *const *)t.names, (const char *const *)t.params,
                             t.n, t.choice == TOOL_CHOICE_NAMED ? t.named : -1, t.parallel, &g,
                             &bad, err) == 0)
            cJSON_AddStringToObject(res, "grammar", g.p);
        else cJSON_AddStringToObject(res, "grammar_error", err);
        sbuf_free(&g);
    }
    api_tools_free(&t);
    free(text);
    free(body);
    chat_template_free(&ct);
}

static int run_render_batch(const char *path) {
    size_t len;
    char *data = slurp(path, &len);
    if (!data) {
        fprintf(stderr, "tokenize: cannot read %s\n", path);
        return 1;
    }
    char err[ERR_LEN];
    for (char *line = data; line < data + len;) {
        char *nl = memchr(line, '\n', (size_t)(data + len - line));
        if (nl) *nl = 0;
        cJSON *j = cJSON_Parse(line);
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(j, "template");
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(j, "context");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "request");
        cJSON *res = cJSON_CreateObject();
        if (cJSON_IsString(tpl) && cJSON_IsObject(req)) {
            render_request(tpl->valuestring, j, req, res);
        } else if (!cJSON_IsString(tpl) || !cJSON_IsObject(ctx)) {
            cJSON_AddBoolToObject(res, "ok", 0);
            cJSON_AddStringToObject(res, "error", "bad batch line");
        } else {
            char *cs = cJSON_PrintUnformatted(ctx), *out = NULL;
            size_t ol;
            if (cs && chat_render_json(tpl->valuestring, strlen(tpl->valuestring), cs, &out, &ol,
                                       err) == 0) {
                cJSON_AddBoolToObject(res, "ok", 1);
                cJSON_AddStringToObject(res, "text", out);
            } else {
                cJSON_AddBoolToObject(res, "ok", 0);
                cJSON_AddStringToObject(res, "error", cs ? err : "out of memory");
            }
            free(out);
            free(cs);
        }
        char *o = cJSON_PrintUnformatted(res);
        if (o) puts(o);
        free(o);
        cJSON_Delete(res);
        cJSON_Delete(j);
        line = nl ? nl + 1 : data + len;
    }
    free(data);
    return 0;
}

/* The command after its options are parsed. */
static int tokenize_run(const struct config *o) {
    const char *path = o->tokenizer, *text = o->text, *file = o->file, *batch = o->batch,
               *chat = o->chat_file;
    int flags = TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, add_gen = o->add_generation_prompt,
        print_prompt = o->print_prompt;
    if (o->no_special) flags &= ~TOK_ADD_SPECIAL;
    if (o->no_parse_special) flags &= ~TOK_PARSE_SPECIAL;
    if (o->render_batch) return run_render_batch(o->render_batch);
    if (!path || (!!text + !!file + !!batch + !!chat) != 1) {
        fprintf(
            stderr,
            "tokenize: give --tokenizer PATH and exactly one of --text, --file, --chat, --batch\n");
        options_usage(stderr, "tokenize");
        return 2;
    }

    char err[ERR_LEN];
    struct tokenizer *t;
    if (tokenizer_load(&t, path, err)) {
        fprintf(stderr, "tokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    char *prompt = NULL;
    if (chat) {
        size_t ml;
        char *msgs = slurp(chat, &ml);
        struct chat_template ct;
        if (!msgs) {
            fprintf(stderr, "tokenize: cannot read %s\n", chat);
            rc = 1;
        } else if (chat_template_load(&ct, t, NULL, err)) {
            fprintf(stderr, "tokenize: %s\n", err);
            rc = 1;
        } else {
            /* apply_chat_template(tokenize=True): no added specials; special-token text in the
             * messages stays plain text (chat.h), --no-parse-special: everywhere */
            size_t pl, n;
            int32_t *ids = NULL;
            struct tok_span *data = NULL;
            size_t nd = 0;
            if (chat_template_render_spans(&ct, msgs, add_gen, NULL, &prompt, &pl, &data, &nd,
                                           err) ||
                (!print_prompt && tokenizer_encode_spans(t, prompt, pl, flags & TOK_PARSE_SPECIAL,
                                                         data, nd, &ids, &n, err))) {
                fprintf(stderr, "tokenize: %s\n", err);
                rc = 1;
            } else if (print_prompt) {
                fputs(prompt, stdout);
            } else {
                print_ids(ids, n);
                putchar('\n');
            }
            free(ids);
            free(data);
            chat_template_free(&ct);
        }
        free(msgs);
        free(prompt);
        tokenizer_free(t);
        return rc;
    }
    if (batch) {
        rc = run_batch(t, batch, flags);
    } else {
        size_t len;
        char *owned = NULL;
        if (file) {
            owned = slurp(file, &len);
            if (!owned) {
                fprintf(stderr, "tokenize: cannot read %s\n", file);
                tokenizer_free(t);
                return 1;
            }
            text = owned;
        } else {
            len = strlen(text);
        }
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(t, text, len, flags, &ids, &n, err)) {
            fprintf(stderr, "tokenize: %s\n", err);
            rc = 1;
        } else {
            print_ids(ids, n);
            putchar('\n');
            free(ids);
        }
        free(owned);
    }
    free(prompt);
    tokenizer_free(t);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    struct config cfg;
    char err[ERR_LEN];
    int rc;
    if (options_load(NULL, CMD_TOKENIZE, argc, argv, &cfg, err)) {
        fprintf(stderr, "tokenize: %s\n", err);
        options_usage(stderr, "tokenize");
        rc = 2;
    } else {
        rc = tokenize_run(&cfg);
    }
    config_free(&cfg);
    return rc;
}

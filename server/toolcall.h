/* Tool calls in the model's own syntax (rank 0, the HTTP thread of one request): which
 * call format a chat template teaches its model, and the model's output split into content
 * and OpenAI tool calls, whole or while it streams (a call may arrive cut into any number
 * of pieces). Pure text in, text out: no sockets, no scheduler.
 *
 * Formats (toolcall_detect picks one from the chat template's source):
 *   HERMES   Qwen2.5, Qwen3, Hermes 2 Pro/3:  <tool_call>\n{"name": N, "arguments":
 * {...}}\n</tool_call> LLAMA3   Llama 3.1/3.2/3.3:  {"name": N, "parameters": {...}}, alone or
 * after <|python_tag|>; several calls separated by ';' MISTRAL  [TOOL_CALLS][{"name": N,
 * "arguments": {...}}, ...]  (also [TOOL_CALLS]N[ARGS]{...}) A call is accepted only when its JSON
 * parses, its name is one of the request's functions and its arguments are a JSON object; anything
 * else stays content, verbatim. */
#ifndef TPD_TOOLCALL_H
#define TPD_TOOLCALL_H

#include <stddef.h>

#include "../util/sbuf.h"

enum tool_format {
    TOOL_FORMAT_NONE, /* the template shows the model no tools */
    TOOL_FORMAT_HERMES,
    TOOL_FORMAT_LLAMA3,
    TOOL_FORMAT_MISTRAL,
};

/* The rule, on the chat template's source, first match wins: it writes "[TOOL_CALLS]" ->
 * MISTRAL; it writes "<function=", "<arg_key>" or ">>>" (other syntaxes: Qwen3-Coder,
 * Nemotron, GLM, functionary) -> NONE; "<tool_call>" and "\"arguments\"" -> HERMES;
 * "<|python_tag|>" or "<|start_header_id|>", and "\"parameters\"" -> LLAMA3; otherwise
 * NONE. src NULL -> NONE. */
enum tool_format toolcall_detect(const char *src);
/* "none", "hermes", "llama3", "mistral"; toolcall_format_parse: -1 for an unknown name. */
const char *toolcall_format_name(enum tool_format f);
int toolcall_format_parse(const char *name);
/* The format's marker strings (NULL-terminated). A model may emit them as control tokens,
 * which the detokenizer leaves out of the text: the caller writes their text into what it
 * feeds instead (api_gen.c). */
const char *const *toolcall_markers(enum tool_format f);

struct tool_call {
    char id[40];     /* "call_" + 24 letters/digits; MISTRAL: 9 (its templates require that) */
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd: the JSON object as the model wrote it */
};

/* One output's parser. Feed text in order; content that is final is appended to the
 * caller's buffer, and each accepted call is appended to calls[] as soon as it is complete.
 * Whitespace-only content after a call (between calls, before the end) is dropped; content
 * text that could still begin a call is held back until it is known. */
struct toolcall_parser {
    enum tool_format f;
    const char *const *names; /* borrowed: the request's function names */
    int n_names;
    int parallel;     /* 0: only the first accepted call is kept */
    int in_call;      /* inside a call's text */
    int opened;       /* LLAMA3: content so far (since the start or the last call) is blank */
    int after_call;   /* a call was accepted */
    struct sbuf pend; /* content not released yet */
    struct sbuf body; /* the call being read, its markers included */
    size_t scan;      /* bytes of body scanned */
    int depth, in_str, esc, json_start; /* the JSON scanner over body */
    size_t json_off;                    /* where the JSON value starts in body */
    int n_calls, cap;
    struct tool_call *calls;
};

void toolcall_parser_init(struct toolcall_parser *p, enum tool_format f, const char *const *names,
                          int n_names, int parallel);
void toolcall_parser_free(struct toolcall_parser *p);
/* Feeds s[0..n); appends released content to content. */
void toolcall_feed(struct toolcall_parser *p, const char *s, size_t n, struct sbuf *content);
/* End of the output: a call still open is accepted if it is complete JSON (a HERMES call
 * whose closing tag never came), else released as content, as is any held text. */
void toolcall_finish(struct toolcall_parser *p, struct sbuf *content);

/* The start of a call in format f, up to where its arguments begin (name given) or where
 * its name begins (name NULL): written after the generation prompt when the request
 * requires a call, the model continues from there. malloc'd; NULL for NONE. */
char *toolcall_prefix(enum tool_format f, const char *name);

/* The GBNF grammar (grammar/grammar.h) of what follows toolcall_prefix(f, named ? names[named]
 * : NULL) for a call that must be made: the rest of a well-formed call in the format, its
 * name one of names[] (named < 0) or names[named], its arguments matching that function's
 * parameters JSON Schema (params[i] NULL: {}); with parallel (and named < 0) more calls
 * may follow; then only the end. Appended to out. 0, or -1 with err and *bad the index of
 * the function whose schema the grammar engine refused. */
int toolcall_grammar(enum tool_format f, const char *const *names, const char *const *params, int n,
                     int named, int parallel, struct sbuf *out, int *bad, char *err);

/* A fresh call id for format f into id[40]. */
void toolcall_new_id(enum tool_format f, char *id);

#endif

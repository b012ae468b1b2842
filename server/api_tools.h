/* The tool-calling fields of a chat request (rank 0, any HTTP thread): tools, tool_choice
 * and parallel_tool_calls validated (a 400 naming the field for anything wrong), and the
 * tool parts of the history made ready for the chat template the way HF templates expect
 * them (vLLM does the same): an assistant's tool_calls[].function.arguments, a JSON string
 * in OpenAI's API, becomes the object it encodes; tools go to the template's `tools`
 * variable exactly as the client sent them. */
#ifndef TPD_API_TOOLS_H
#define TPD_API_TOOLS_H

#include "toolcall.h"

#define API_MAX_TOOLS 128
#define API_MAX_TOOL_NAME 64

struct cJSON;
struct api_error;
struct grammar;
struct grammar_vocab;

enum tool_choice {
    TOOL_CHOICE_NONE,     /* no calls are parsed: the output is content */
    TOOL_CHOICE_AUTO,     /* the model decides; its calls are parsed */
    TOOL_CHOICE_REQUIRED, /* at least one call */
    TOOL_CHOICE_NAMED,    /* exactly a call of names[named] */
};

struct api_tools {
    int n;            /* functions declared (0: the request has no tools) */
    char **names;     /* owned, n of them: [A-Za-z0-9_-]{1,64} */
    char **params;    /* owned: each one's parameters JSON Schema as JSON text, NULL when absent */
    char *tools_json; /* owned: {"tools": [...]} for the template, NULL without tools */
    enum tool_choice choice;
    int named;               /* TOOL_CHOICE_NAMED: the index in names */
    int parallel;            /* parallel_tool_calls (default true) */
    enum tool_format format; /* the model's call format */
    char *prefix;            /* owned, REQUIRED/NAMED: the start of a call written after the
                              * generation prompt (the model continues it), else NULL */
};

/* Reads tools, tool_choice and parallel_tool_calls of body for a model whose template uses
 * format. 0, or -1 with e (400). */
int api_tools_read(const struct cJSON *body, enum tool_format format, struct api_tools *t,
                   struct api_error *e);
void api_tools_free(struct api_tools *t);

/* REQUIRED / NAMED: *out becomes the compiled grammar (toolcall_grammar) that decoding
 * must follow from t->prefix on (NULL for other choices). 0, or -1 with e: a 400 naming
 * the function whose parameters schema the grammar engine cannot take. */
int api_tools_grammar(const struct api_tools *t, struct grammar_vocab *v, struct grammar **out,
                      struct api_error *e);

/* Checks the tool parts of message i (m: the caller's copy, with this role) and turns its
 * tool calls' arguments into objects. 0, or -1 with e. */
int api_tools_message(struct cJSON *m, int i, const char *role, struct api_error *e);

#endif

/* Chat-template parser: Jinja source -> AST (the node and template types the renderer
 * walks). Unknown tags are load-time errors; unknown filters and tests are only noted.
 * Runs once per template on the loading thread; the AST lives in the template's arena and
 * is read-only afterwards, so rendering threads may share it. */
#ifndef TPD_JINJA_PARSE_H
#define TPD_JINJA_PARSE_H

#include "jinja_value.h"

enum jn_kind {
    /* expressions */
    JN_LIT,
    JN_NAME,
    JN_ATTR,
    JN_ITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_NOT,
    JN_NEG,
    JN_POS,
    JN_BIN,
    JN_AND,
    JN_OR,
    JN_COND,
    JN_LIST,
    JN_DICT,
    JN_TUPLE,
    /* statements */
    JN_TEXT,
    JN_OUT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SETBLOCK,
    JN_MACRO,
    JN_BREAK,
    JN_CONTINUE,
    JN_FILTERBLOCK,
    JN_BODY,
    JN_CALLBLOCK,
};

enum jn_binop {
    JB_ADD,
    JB_SUB,
    JB_MUL,
    JB_DIV,
    JB_FDIV,
    JB_MOD,
    JB_POW,
    JB_CAT,
    JB_EQ,
    JB_NE,
    JB_LT,
    JB_LE,
    JB_GT,
    JB_GE,
    JB_IN,
    JB_NOTIN
};

struct jnode {
    enum jn_kind k;
    int line;
    int op;                  /* JN_BIN: enum jn_binop; JN_TEST: negated */
    struct jv lit;           /* JN_LIT; JN_TEXT text; names (JN_NAME/ATTR/FILTER/TEST/SET) */
    struct jnode *a, *b, *c; /* operands / condition / body / else */
    struct jnode **args;     /* call / filter / test args, list items, dict keys, body stmts */
    struct jnode **kwvals;   /* dict values, keyword argument values */
    struct jv *kwnames;      /* keyword argument names; for targets / macro params */
    size_t n_args, n_kw;
};

struct jtemplate {
    struct arena arena;
    struct jnode *body;
};

/* Parses src into t->body (t->arena set up by the caller). Unknown tags are errors; an
 * unknown filter or test is not: as in jinja2, a render fails only when it reaches one (it
 * may sit in a branch a plain chat never takes). Returns 0, or -1 + err ("template line N:
 * ..."). */
int jinja_parse_source(struct jtemplate *t, const char *src, size_t len, char *err);

#endif

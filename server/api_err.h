/* A client-visible error of the OpenAI API: the HTTP status and the fields of OpenAI's
 * {"error": {...}} body. Every request reader of server/ (api, api_grammar, api_tools)
 * fills one; the HTTP layer writes it. Any thread. */
#ifndef TPD_API_ERR_H
#define TPD_API_ERR_H

#include <stddef.h>

#include "../util/err.h"

struct api_error {
    int status;
    char message[ERR_LEN];
    char param[96];   /* the offending field ("messages[2].role"), or "" */
    const char *code; /* NULL or a short machine-readable code */
};

/* Fills e and returns -1, so validators can `return api_err(...)`. */
int api_err(struct api_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error": {"message", "type", "param", "code"}}; malloc'ed, NUL-terminated. */
char *api_error_json(const struct api_error *e, size_t *len);

#endif

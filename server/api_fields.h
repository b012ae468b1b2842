/* Request fields of OpenAI's API (and vLLM's) that tpd knows but does not implement: a 400
 * naming the field, never a silently different answer. A field at its neutral value (null,
 * "", false, 0, best_of equal to n, modalities ["text"]) passes. Any thread. */
#ifndef TPD_API_FIELDS_H
#define TPD_API_FIELDS_H

#include <cjson/cJSON.h>

#include "api.h"
#include "api_err.h"

/* 0, or -1 with e naming the first such field of body. n: the request's choices. */
int api_fields_check(const cJSON *body, enum api_kind kind, int n, struct api_error *e);

#endif

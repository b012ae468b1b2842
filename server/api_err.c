#include "api_err.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../util/fatal.h"

int api_err(struct api_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *error_type(int status) {
    switch (status) {
    case 400:
    case 405:
    case 413: return "invalid_request_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return "server_error";
    }
}

char *api_error_json(const struct api_error *e, size_t *len) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", error_type(e->status));
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNumberToObject(o, "code", e->status);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) FATAL("out of memory for an error body");
    *len = strlen(s);
    return s;
}

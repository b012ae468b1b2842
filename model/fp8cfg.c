/* FP8 checkpoints' quantization_config and scale names (fp8cfg.h). */
#include "fp8cfg.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../util/err.h"

/* ---- quantization_config ------------------------------------------------------------ */

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A [rows, cols] pair of positive integers that keeps 32-blocks inside one tile. */
static int block_pair(struct fp8w_config *q, const cJSON *a, const char *path, const char *key,
                      char *err) {
    const cJSON *r = cJSON_GetArrayItem(a, 0), *c = cJSON_GetArrayItem(a, 1);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 || !cJSON_IsNumber(r) ||
        !cJSON_IsNumber(c) || r->valuedouble < 1 || c->valuedouble < 1 ||
        r->valuedouble > FP8W_MAX_SCALE_BLOCK || c->valuedouble > FP8W_MAX_SCALE_BLOCK ||
        r->valuedouble != (int)r->valuedouble || c->valuedouble != (int)c->valuedouble)
        return err_set(err, "%s: quantization_config: %s must be two integers in [1, %d]", path,
                       key, FP8W_MAX_SCALE_BLOCK);
    q->block_rows = (int)r->valuedouble;
    q->block_cols = (int)c->valuedouble;
    if (q->block_cols % FP8W_ELEMS)
        return err_set(err,
                       "%s: quantization_config: %s [%d, %d]: the block's columns must "
                       "be a multiple of %d (not supported)",
                       path, key, q->block_rows, q->block_cols, FP8W_ELEMS);
    q->scheme = FP8W_BLOCK;
    return 0;
}

/* compressed-tensors: every config group 8-bit float weights with one strategy; dynamic
 * activations only. */
static int parse_ct(struct fp8w_config *q, const cJSON *qc, const char *path, char *err) {
    const char *fmt = json_str(qc, "format");
    if (!fmt || strcmp(fmt, "float-quantized"))
        return err_set(err,
                       "%s: quantization_config: compressed-tensors format '%s' is not "
                       "supported (FP8: float-quantized; INT4: pack-quantized)",
                       path, fmt ? fmt : "(none)");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(qc, "kv_cache_scheme");
    if (kv && !cJSON_IsNull(kv))
        return err_set(err,
                       "%s: quantization_config: kv_cache_scheme is not supported (tpd "
                       "chooses its KV cache type itself: kv_type)",
                       path);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return err_set(err,
                       "%s: quantization_config: compressed-tensors without "
                       "config_groups",
                       path);
    for (const cJSON *g = groups->child; g; g = g->next) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
        const char *type = json_str(w, "type"), *strat = json_str(w, "strategy");
        if (!cJSON_IsObject(w) || !cJSON_IsNumber(bits) || bits->valuedouble != 8 || !type ||
            strcmp(type, "float"))
            return err_set(err,
                           "%s: quantization_config: group '%s': weights of %g-bit type "
                           "'%s' are not supported (FP8: 8-bit float)",
                           path, g->string, cJSON_IsNumber(bits) ? bits->valuedouble : 0.0,
                           type ? type : "(none)");
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(w, "symmetric")) ||
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "dynamic")))
            return err_set(err,
                           "%s: quantization_config: group '%s': asymmetric or dynamic "
                           "weight scales are not supported",
                           path, g->string);
        struct fp8w_config one = *q;
        if (strat && !strcmp(strat, "tensor")) {
            one.scheme = FP8W_TENSOR;
        } else if (strat && !strcmp(strat, "channel")) {
            one.scheme = FP8W_CHANNEL;
        } else if (strat && !strcmp(strat, "block")) {
            if (block_pair(&one, cJSON_GetObjectItemCaseSensitive(w, "block_structure"), path,
                           "block_structure", err))
                return -1;
        } else {
            return err_set(err,
                           "%s: quantization_config: group '%s': weight strategy '%s' "
                           "is not supported (tensor, channel, block)",
                           path, g->string, strat ? strat : "(none)");
        }
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
        if (in && !cJSON_IsNull(in) &&
            !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "dynamic")))
            return err_set(err,
                           "%s: quantization_config: group '%s': static input "
                           "activation scales are not supported (dynamic ones are: tpd "
                           "runs them as W8A16)",
                           path, g->string);
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(g, "output_activations");
        if (out && !cJSON_IsNull(out))
            return err_set(err,
                           "%s: quantization_config: group '%s': output activation "
                           "quantization is not supported",
                           path, g->string);
        if (q->scheme != FP8W_NONE && (q->scheme != one.scheme || q->block_rows != one.block_rows ||
                                       q->block_cols != one.block_cols))
            return err_set(err,
                           "%s: quantization_config: config groups with different "
                           "weight schemes are not supported",
                           path);
        *q = one;
    }
    q->scale_suffix = "weight_scale";
    return 0;
}

int fp8w_config_parse(struct fp8w_config *q, const char *json, size_t len, const char *path,
                      char *err) {
    memset(q, 0, sizeof *q);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return err_set(err, "%s: not valid JSON", path);
    int rc = 0;
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!qc || cJSON_IsNull(qc)) goto out;
    const char *m = json_str(qc, "quant_method");
    snprintf(q->method, sizeof q->method, "%s", m ? m : "(none)");
    if (!cJSON_IsObject(qc) || !m) {
        rc = err_set(err, "%s: quantization_config without a quant_method string", path);
    } else if (!strcmp(m, "compressed-tensors")) {
        rc = parse_ct(q, qc, path, err);
    } else if (!strcmp(m, "fp8")) {
        const char *act = json_str(qc, "activation_scheme"), *fmt = json_str(qc, "fmt");
        if (fmt && strcmp(fmt, "e4m3"))
            rc = err_set(err, "%s: quantization_config: fp8 fmt '%s' is not supported (e4m3)", path,
                         fmt);
        else if (act && strcmp(act, "dynamic"))
            rc = err_set(err,
                         "%s: quantization_config: fp8 activation_scheme '%s' is not "
                         "supported (dynamic, run as W8A16)",
                         path, act);
        else if (!cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size"))
            rc = err_set(err,
                         "%s: quantization_config: fp8 without weight_block_size is not "
                         "supported",
                         path);
        else
            rc = block_pair(q, cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size"), path,
                            "weight_block_size", err);
        q->scale_suffix = "weight_scale_inv";
    } else if (!strcmp(m, "fbgemm_fp8")) {
        q->scheme = FP8W_CHANNEL;
        q->scale_suffix = "weight_scale";
    } else {
        rc = err_set(err,
                     "%s: quantization_config: quant_method '%s' is not supported (FP8: "
                     "compressed-tensors float-quantized, fp8, fbgemm_fp8; INT4: gptq, awq, "
                     "compressed-tensors pack-quantized)",
                     path, m);
    }
out:
    cJSON_Delete(root);
    if (rc) memset(q, 0, sizeof *q);
    return rc;
}

int fp8w_scale_of(const struct fp8w_config *q, const char *name, char *out, size_t n) {
    if (q->scheme == FP8W_NONE) return 0;
    size_t ln = strlen(name), ls = strlen(q->scale_suffix);
    if (ln <= ls + 1 || name[ln - ls - 1] != '.' || strcmp(name + ln - ls, q->scale_suffix))
        return 0;
    return snprintf(out, n, "%.*s.weight", (int)(ln - ls - 1), name) < (int)n;
}
